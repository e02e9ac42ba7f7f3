"""Triton's generate extension: flat JSON objects <-> core requests and responses.

``POST /v2/models/{m}/generate`` (and ``generate_stream``) take ``{"text_input": "...", "parameters":
{...}, ...}``: a top-level key that names a model input becomes that input, built from the JSON value
with the datatype the model declares (a scalar has shape ``[1]``, a list its own shape, and a batching
model gets a batch dimension of 1); any other key is a request parameter, like those in ``parameters``.
A response is ``{"model_name": ..., "model_version": ..., <output>: value, ...}``: an output of one
element as a scalar, a longer one as a (nested) list, BYTES as text.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from naiad.core import datatypes
from naiad.core.errors import InvalidArgumentError
from naiad.core.request import InferRequest, InferResponse, Tensor
from naiad.core.signature import ModelSignature, TensorSpec

_RESERVED = frozenset({"sequence_id", "sequence_start", "sequence_end", "priority", "timeout"})
_JSON_VALUE = (bool, int, float, str)


def decode_generate(
    body: bytes, signature: ModelSignature, model_name: str, model_version: str
) -> InferRequest:
    """The core request a generate body asks for (checked against ``signature`` by the data plane)."""
    try:
        document = orjson.loads(body) if body.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidArgumentError("failed to parse the request JSON buffer: expected a JSON object")
    request = InferRequest(model_name=model_name, model_version=model_version)
    parameters = document.get("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidArgumentError("Unable to parse 'parameters': expected a JSON object")
    for key, value in parameters.items():
        _parameter(request, key, value)
    for key, value in document.items():
        if key == "parameters":
            continue
        spec = signature.input_spec(key)
        if spec is None:
            _parameter(request, key, value)
        else:
            request.inputs.append(
                Tensor(key, spec.datatype, _array(spec, value, signature.max_batch_size > 0))
            )
    return request


def _parameter(request: InferRequest, key: str, value: Any) -> None:
    if key.startswith("triton_"):
        raise InvalidArgumentError(
            "parameter keys starting with 'triton_' are reserved for Triton usage and should not be "
            "specified."
        )
    if not isinstance(value, _JSON_VALUE):
        raise InvalidArgumentError(
            f"parameter '{key}' has a value of unsupported type: expected bool, number or string"
        )
    if key not in _RESERVED:
        request.parameters[key] = value
    elif key == "sequence_id":
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise InvalidArgumentError(
                "Unable to parse 'sequence_id': expected an unsigned integer or a string"
            )
        request.sequence_id = value
    elif key in ("sequence_start", "sequence_end"):
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"Unable to parse '{key}': expected a boolean")
        setattr(request, key, value)
    else:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgumentError(f"Unable to parse '{key}': expected an unsigned integer")
        if key == "priority":
            request.priority = value
        else:
            request.timeout_us = value


def _array(spec: TensorSpec, value: Any, batched: bool) -> np.ndarray[Any, Any]:
    datatype = spec.datatype
    if datatype in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"receiving {datatype} data via JSON is not supported for input {spec.name}"
        )
    try:
        if datatype == "BYTES":
            raw = np.asarray(value, dtype=np.object_)
            array: np.ndarray[Any, Any] = np.empty(raw.shape, dtype=np.object_)
            for index, item in np.ndenumerate(raw):
                if not isinstance(item, str):
                    raise InvalidArgumentError(f"Unable to parse input '{spec.name}': expected strings")
                array[index] = item.encode("utf-8")
        else:
            array = np.asarray(value, dtype=datatypes.NUMPY_DTYPE[datatype])
    except (ValueError, TypeError, OverflowError):
        raise InvalidArgumentError(f"Unable to parse input '{spec.name}' as {datatype}") from None
    if array.ndim == 0:
        array = array.reshape(1)
    return array.reshape((1, *array.shape)) if batched else array


def encode_generate(response: InferResponse) -> bytes:
    """The generate response object for one response."""
    document: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    for tensor in response.outputs:
        document[tensor.name] = _value(tensor)
    return orjson.dumps(document)


def _value(tensor: Tensor) -> Any:
    if tensor.datatype in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"sending {tensor.datatype} data via JSON is not supported for output {tensor.name}"
        )
    data = tensor.data
    if tensor.datatype == "BYTES":
        flat = [
            item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
            for item in data.reshape(-1)
        ]
        return flat[0] if len(flat) == 1 else np.array(flat, dtype=object).reshape(data.shape).tolist()
    if data.size == 1:
        return data.reshape(-1)[0].item()
    return data.tolist()
