"""Turning what a Python model's ``execute`` returned into one server result per request.

Triton's rules: ``execute`` must return a list of ``InferenceResponse`` as long as the request list
(otherwise every request fails), and a response carrying a ``TritonError`` fails only its own request,
with that error's code.  Output arrays are passed on as they are, except BYTES, which the server always
carries as an ``np.object_`` array of ``bytes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from naiad.backends.base import ExecuteResult
from naiad.backends.python import pb_utils
from naiad.core.errors import ErrorCode, ErrorResponse, InferenceServerError, InternalError
from naiad.core.request import InferRequest, InferResponse, Tensor

if TYPE_CHECKING:
    from naiad.backends.python.reshapes import Reshapes

#: ``TritonError`` code (the index) -> server error code.
_ERROR_CODES = (
    ErrorCode.UNKNOWN,
    ErrorCode.INTERNAL,
    ErrorCode.NOT_FOUND,
    ErrorCode.INVALID_ARG,
    ErrorCode.UNAVAILABLE,
    ErrorCode.UNSUPPORTED,
    ErrorCode.ALREADY_EXISTS,
    ErrorCode.CANCELLED,
)

_PARAMETER_TYPES = (bool, int, float, str)


def bytes_array(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``array`` as an ``np.object_`` array of ``bytes`` (str is UTF-8 encoded; NULs are kept)."""
    if array.dtype.kind == "O":
        flat = array.reshape(-1)
        if all(type(item) is bytes for item in flat):
            return array
        items = [_to_bytes(item) for item in flat]
    else:
        items = [_to_bytes(item) for item in array.reshape(-1).tolist()]
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out.reshape(array.shape)


def _to_bytes(item: Any) -> bytes:
    if isinstance(item, bytes | bytearray | memoryview):
        return bytes(item)
    if isinstance(item, str):
        return item.encode("utf-8")
    return str(item).encode("utf-8")


def _response_error(error: pb_utils.TritonError) -> ErrorResponse:
    code = error.code()
    mapped = _ERROR_CODES[code] if isinstance(code, int) and 0 <= code < len(_ERROR_CODES) else None
    return ErrorResponse(error.message(), mapped or ErrorCode.UNKNOWN)


def to_result(
    response: Any,
    request: InferRequest,
    index: int,
    model_name: str,
    model_version: str,
    reshapes: Reshapes | None = None,
) -> ExecuteResult:
    """One ``pb_utils.InferenceResponse`` (the ``index``-th of the batch) as a server result, its
    outputs in their config ``dims`` (``reshapes``)."""
    if not isinstance(response, pb_utils.InferenceResponse):
        return InternalError(
            f"model '{model_name}' returned {type(response).__name__} for request {index}; "
            "expected an InferenceResponse"
        )
    if response._error is not None:
        return _response_error(response._error)
    outputs: list[Tensor] = []
    for tensor in response._output_tensors:
        if not isinstance(tensor, pb_utils.Tensor):
            return InternalError(
                f"model '{model_name}' returned {type(tensor).__name__} among the output tensors of "
                f"request {index}; expected pb_utils.Tensor"
            )
        array = tensor._array
        datatype = tensor._datatype
        if datatype == "BYTES":
            array = bytes_array(array)
        elif not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        outputs.append(Tensor(tensor._name, datatype, array))
    parameters = response._parameters
    for key, value in parameters.items():
        if not isinstance(value, _PARAMETER_TYPES):
            return InternalError(
                f"model '{model_name}' returned response parameter '{key}' of type "
                f"{type(value).__name__}; expected bool, int, float or str"
            )
    if reshapes is not None:
        try:
            outputs = reshapes.outputs(outputs)
        except ValueError as exc:  # (an output the model made in another shape than its reshape's)
            return InternalError(str(exc))
    return InferResponse(model_name, model_version, request.id, outputs, parameters)


def to_results(
    returned: Any,
    requests: Sequence[InferRequest],
    model_name: str,
    model_version: str,
    reshapes: Reshapes | None = None,
) -> list[ExecuteResult]:
    """One result per request, in order, from the value ``execute`` returned."""
    count = len(requests)
    if not isinstance(returned, list):
        message = f"Expected a list in the execute return, got {type(returned).__name__}"
        return [InternalError(message) for _ in range(count)]
    if len(returned) != count:
        message = (
            "Number of InferenceResponse objects do not match the number of InferenceRequest "
            f"objects. InferenceRequest(s) size is:{count}, and InferenceResponse(s) size "
            f"is:{len(returned)}"
        )
        return [InternalError(message) for _ in range(count)]
    return [
        to_result(response, request, index, model_name, model_version, reshapes)
        for index, (response, request) in enumerate(zip(returned, requests, strict=True))
    ]


def triton_error(error: InferenceServerError) -> pb_utils.TritonError:
    """A server error as the ``TritonError`` a model reads from a BLS response."""
    return pb_utils.TritonError(error.message, _ERROR_CODES.index(error.code))


def to_pb_response(answer: InferResponse | InferenceServerError | None) -> pb_utils.InferenceResponse:
    """A server answer as the ``pb_utils.InferenceResponse`` a BLS call returns (``None``: the empty
    final response of a decoupled model).  Output arrays are handed over as they are."""
    if answer is None:
        return pb_utils.InferenceResponse()
    if isinstance(answer, InferenceServerError):
        return pb_utils.InferenceResponse(error=triton_error(answer))
    wrap = pb_utils.Tensor._wrap
    tensors = [wrap(tensor.name, tensor.datatype, tensor.data) for tensor in answer.outputs]
    return pb_utils.InferenceResponse(tensors, parameters=answer.parameters)
