"""One traced request: its id, the settings it was sampled under, and the timestamps it collects.

The timestamp list is shared with the request (``InferRequest.timestamps``), so the frontend, the
data plane and the scheduler each append their points to it without knowing about tracing.  Names
and meanings are Triton's: ``HTTP_RECV_START`` ... ``HTTP_SEND_END`` (``GRPC_WAITREAD_*``,
``GRPC_SEND_*`` for gRPC) around ``REQUEST_START``, ``QUEUE_START``, ``COMPUTE_START``,
``COMPUTE_INPUT_END``, ``COMPUTE_OUTPUT_START``, ``COMPUTE_END``, ``INFER_RESPONSE_COMPLETE`` and
``REQUEST_END``; all are ``time.monotonic_ns()`` (Triton's steady clock).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from naiad.core.request import InferRequest, InferResponse, Tensor

#: The first timestamp each protocol records, and its receive/send points in order.
PROTOCOL_POINTS = {
    "HTTP": ("HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END"),
    "GRPC": ("GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "GRPC_SEND_START", "GRPC_SEND_END"),
}

_now = time.monotonic_ns


def completed(timestamps: list[tuple[str, int]]) -> None:
    """Mark a traced request's response complete (``INFER_RESPONSE_COMPLETE``, ``REQUEST_END``), now,
    unless that is marked already: with frontend workers the engine marks it as it answers, in the
    order its scheduler delivered the responses (``preserve_ordering`` shows in the trace as in
    Triton's), whatever order the workers then resume their requests in."""
    for name, _ in timestamps:
        if name == "INFER_RESPONSE_COMPLETE":
            return
    now = _now()
    timestamps += (("INFER_RESPONSE_COMPLETE", now), ("REQUEST_END", now))


class Trace:
    """A sampled request, from its first byte to its last (see :class:`~naiad.tracing.tracer.Tracer`)."""

    __slots__ = ("context", "id", "model", "points", "request", "response", "scope", "timestamps")

    def __init__(
        self, trace_id: int, scope: Any, model: str, protocol: str, start_ns: int, context: Any
    ) -> None:
        self.id = trace_id
        self.scope = scope
        self.model = model
        self.points = PROTOCOL_POINTS[protocol]
        self.context = context
        self.request: InferRequest | None = None
        self.response: InferResponse | None = None
        self.timestamps: list[tuple[str, int]] = [(self.points[0], start_ns)]

    def received(self, request: InferRequest) -> None:
        """The request is decoded: from here the data plane and the scheduler add their points."""
        now = _now()
        self.timestamps += ((self.points[1], now), ("REQUEST_START", now))
        self.request = request
        request.timestamps = self.timestamps

    def answered(self, response: InferResponse) -> None:
        completed(self.timestamps)
        self.response = response

    def sending(self) -> None:
        self.timestamps.append((self.points[2], _now()))

    def sent(self) -> None:
        self.timestamps.append((self.points[3], _now()))

    @property
    def version(self) -> int:
        """The version that served the request (Triton's ``model_version``), -1 if none did."""
        if self.response is not None and self.response.model_version.isdigit():
            return int(self.response.model_version)
        if self.request is not None and self.request.model_version.isdigit():
            return int(self.request.model_version)
        return -1

    @property
    def request_id(self) -> str:
        return self.request.id if self.request is not None else ""

    def ordered(self) -> list[tuple[str, int]]:
        """Timestamps by time, the request's end points closing the request part (failures too)."""
        stamps = sorted(self.timestamps, key=lambda stamp: stamp[1])
        names = {name for name, _ in stamps}
        if "REQUEST_START" in names and "REQUEST_END" not in names:
            ends = [ns for name, ns in stamps if name == self.points[2]]
            stamps.append(("REQUEST_END", ends[0] if ends else stamps[-1][1]))
            stamps.sort(key=lambda stamp: stamp[1])
        return stamps

    def tensors(self) -> list[tuple[str, Tensor]]:
        """``TENSORS`` level: the request's inputs and the response's outputs, with Triton's activity."""
        tensors: list[tuple[str, Tensor]] = []
        if self.request is not None:
            tensors += [("TENSOR_QUEUE_INPUT", tensor) for tensor in self.request.inputs]
        if self.response is not None:
            tensors += [("TENSOR_BACKEND_OUTPUT", tensor) for tensor in self.response.outputs]
        return tensors


def tensor_entry(trace_id: int, activity: str, tensor: Tensor) -> dict[str, Any]:
    """A ``TENSORS`` record as Triton writes it: values comma-joined, shape "1,16", strings quoted."""
    return {
        "id": trace_id,
        "activity": activity,
        "tensor": {
            "name": tensor.name,
            "data": _values(tensor),
            "shape": ",".join(str(d) for d in tensor.shape),
            "dtype": tensor.datatype,
        },
    }


def _values(tensor: Tensor) -> str:
    data = tensor.data
    if tensor.datatype in ("FP16", "BF16"):
        return ""  # Triton leaves half-precision data out
    flat = data.reshape(-1)
    if tensor.datatype == "BYTES":
        return ",".join(
            '"' + (v.decode(errors="replace") if isinstance(v, bytes) else str(v)) + '"' for v in flat
        )
    if tensor.datatype == "BOOL":
        return ",".join("1" if v else "0" for v in flat)
    if np.issubdtype(data.dtype, np.floating):
        return ",".join(f"{v:g}" for v in flat.tolist())
    return ",".join(str(v) for v in flat.tolist())
