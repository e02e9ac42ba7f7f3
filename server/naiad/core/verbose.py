"""Triton's verbose (``--log-verbose 1``) lines about one inference request, worded as Triton's.

Users grep their logs for these when a request misbehaves, so the words are Triton's
(``infer_request.cc``, ``infer_response.cc``), less the C++ object addresses Triton also prints.
They are only built when verbose logging is on: callers check ``Logger.isEnabledFor(DEBUG)`` first.
"""

from __future__ import annotations

from naiad.core.errors import request_prefix
from naiad.core.request import InferRequest, InferResponse

#: Triton's request flags: sequence start and end.
_SEQUENCE_START, _SEQUENCE_END = 1, 2


def prepared(request: InferRequest, version: int, batch_size: int) -> str:
    """The line Triton logs once a request is checked and about to be scheduled.

    ``batch_size`` is 0 for a model that does not batch, as Triton prints it."""
    flags = _SEQUENCE_START if request.sequence_start else 0
    flags |= _SEQUENCE_END if request.sequence_end else 0
    requested = request.model_version or "-1"
    lines = [
        f"{request_prefix(request.id)}prepared: request id: {request.id}, model: "
        f"{request.model_name}, requested version: {requested}, actual version: {version}, flags: "
        f"{flags:#x}, correlation id: {request.sequence_id}, batch size: {batch_size}, priority: "
        f"{request.priority}, timeout (us): {request.timeout_us}",
        "original inputs:",
    ]
    inputs = [_input(name, datatype, shape, batch_size) for name, datatype, shape in _shapes(request)]
    lines += inputs
    lines += ["override inputs:", "inputs:", *inputs, "original requested outputs:"]
    outputs = [output.name for output in request.outputs or ()]
    lines += [*outputs, "requested outputs:", *outputs]
    return "\n".join(lines) + "\n"


def state_change(request_id: str, before: str, after: str) -> str:
    """Triton's line for a request moving on (``PENDING`` in a queue, ``EXECUTING``, ``RELEASED``):
    where a request that never answered stopped."""
    return f"{request_prefix(request_id)}Setting state from {before} to {after}"


def infer_failed(request_id: str, message: str) -> str:
    """Triton's frontends' line for an inference refused or failed (its error as the client gets it)."""
    return f"{request_prefix(request_id)}Infer failed: {message}"


def response_outputs(response: InferResponse) -> list[str]:
    """Triton's ``add response output`` line for each output of a response."""
    return [
        f"add response output: output: {t.name}, type: {t.datatype}, shape: {_dims(t.data.shape)}"
        for t in response.outputs
    ]


def _shapes(request: InferRequest) -> list[tuple[str, str, tuple[int, ...]]]:
    return [(t.name, t.datatype, tuple(t.data.shape)) for t in request.inputs]


def _input(name: str, datatype: str, shape: tuple[int, ...], batch_size: int) -> str:
    item_shape = shape[1:] if batch_size else shape
    return (
        f"input: {name}, type: {datatype}, original shape: {_dims(shape)}, batch + shape: "
        f"{_dims(shape)}, shape: {_dims(item_shape)}"
    )


def _dims(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"
