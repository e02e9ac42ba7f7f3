"""The messages between the engine and a model process, apart from tensors (see :mod:`.shm`).

A request crosses as its fields and its inputs' placements in shared memory; answers that a model
process sends while an execution runs (a decoupled model's responses, BLS answers) and BLS requests
travel as tuples whose tensors are pickled with them: they are rare next to executions.
"""

from __future__ import annotations

from typing import Any

from naiad.backends.python import shm
from naiad.core.errors import ErrorCode, InferenceServerError
from naiad.core.request import InferRequest, InferResponse, RequestedOutput, Tensor


def request_message(request: InferRequest, placements: list[shm.Placement]) -> tuple[Any, ...]:
    """The fields of ``request`` a Python model can read, with its inputs' placements."""
    outputs = None if request.outputs is None else [output.name for output in request.outputs]
    return (
        request.model_name,
        request.id,
        request.parameters,
        outputs,
        request.timeout_us,
        request.sequence_id,
        request.sequence_start,
        request.sequence_end,
        placements,
    )


#: An answer as it crosses the pipe: ``("ok", parameters, [(name, datatype, array)])``,
#: ``("error", code, message)``, or ``None`` (a decoupled model's final flag without a response).
PackedAnswer = tuple[Any, ...] | None


def pack_answer(answer: InferResponse | InferenceServerError | None) -> PackedAnswer:
    if answer is None:
        return None
    if isinstance(answer, InferenceServerError):
        return ("error", answer.code.value, answer.message)
    return ("ok", answer.parameters, [(t.name, t.datatype, t.data) for t in answer.outputs])


def unpack_answer(
    packed: PackedAnswer, model_name: str, model_version: str
) -> InferResponse | InferenceServerError | None:
    if packed is None:
        return None
    if packed[0] == "error":
        return InferenceServerError(packed[2], ErrorCode(packed[1]))
    outputs = [Tensor(name, datatype, array) for name, datatype, array in packed[2]]
    return InferResponse(model_name, model_version, "", outputs, packed[1])


def bls_message(request: InferRequest) -> tuple[Any, ...]:
    """A model's BLS request as its worker process forwards it (tensors travel pickled)."""
    outputs = None if request.outputs is None else [output.name for output in request.outputs]
    inputs = [(t.name, t.datatype, t.data) for t in request.inputs]
    return (
        request.model_name,
        request.model_version,
        request.id,
        request.parameters,
        outputs,
        request.timeout_us,
        request.sequence_id,
        request.sequence_start,
        request.sequence_end,
        inputs,
    )


def bls_request(message: tuple[Any, ...]) -> InferRequest:
    name, version, request_id, parameters, outputs, timeout_us, sequence_id, start, end, inputs = message
    return InferRequest(
        name,
        version,
        request_id,
        [Tensor(tensor_name, datatype, array) for tensor_name, datatype, array in inputs],
        None if outputs is None else [RequestedOutput(output) for output in outputs],
        parameters,
        timeout_us=timeout_us,
        sequence_id=sequence_id,
        sequence_start=start,
        sequence_end=end,
    )
