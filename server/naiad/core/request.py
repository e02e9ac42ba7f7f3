"""Transport-free inference request and response.

Both frontends decode their wire format into these types and encode the answer from them, so the data
plane, schedulers and backends see one shape whatever the client spoke.  Tensors are numpy arrays; the
binary transports hand in zero-copy ``np.frombuffer`` views.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from naiad.core.errors import InferenceServerError

#: Parameter values the protocols can carry (bool, int, float, str).
ParameterValue = bool | int | float | str
Parameters = dict[str, ParameterValue]

#: Request parameter keys Triton parses itself (its ``kReservedParameterKeys``): they never reach a
#: model as parameters, from a request's ``parameters`` or from a forwarded header.
RESERVED_PARAMETERS = frozenset(
    {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output", "headers"}
)


@dataclass(slots=True)
class Tensor:
    """A named tensor.  ``datatype`` is the protocol name (``FP32``, ``BYTES``...)."""

    name: str
    datatype: str
    data: np.ndarray[Any, Any]
    parameters: Parameters = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)


class OutputMemory(Protocol):
    """Where a request's outputs are going, offered to the backend that computes them (the role of
    Triton's response allocator).  A frontend worker's request gets one: the worker reads its
    response's tensors from shared memory, and an output the engine's event loop had to copy there
    would cost the loop time in proportion to its size, for every request of every model; a
    backend that computes on a thread of its own (ONNX Runtime, PyTorch, TensorRT) copies it there
    itself, without the GIL.  Safe to call from any thread."""

    #: The key model processes know this memory by (``naiad.ipc.arena.SharedArenas``; 0: not lent to
    #: them): a model process writes its outputs there itself (``reserve``).
    key: int

    def place(self, datatype: str, array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
        """``array`` copied to where the response goes, to answer with instead of ``array``; ``None``
        where it is not worth it or not possible (a small or BYTES tensor, no room now, or the
        request is already answered): the caller keeps ``array``."""
        ...

    def reserve(self, nbytes: int) -> int | None:
        """The offset of a block of ``nbytes`` a model process may write an output into, held until
        :meth:`release`; ``None`` where not worth it or not possible."""
        ...

    def release(self, offsets: list[int]) -> None:
        """The execution that could write the reserved ``offsets`` ended."""
        ...

    def kept(self, array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """``array``, or a copy where it lies in memory reused once the request is answered (the
        frontend worker's request or response memory: an input, or an output placed for the response),
        for what the engine keeps past the request (a sequence's implicit state)."""
        ...


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for, with its per-output parameters (``binary_data``...)."""

    name: str
    parameters: Parameters = field(default_factory=dict)


@dataclass(slots=True)
class InferRequest:
    """One client request for one model.

    ``model_version`` is ``""`` when the client named none (the highest ready version serves it).
    ``outputs`` is ``None`` when the client asked for all outputs.
    ``parameters`` holds the custom parameters backends see; Triton's reserved keys (``priority``,
    ``timeout``, ``sequence_*``, ``binary_data_output``) are parsed into their own fields by the codecs.
    ``cancelled`` is set by the scheduler (:meth:`cancel`) when the client gives up (disconnects,
    cancels) after the request was handed to a model instance, so a backend can stop early (Python
    ``is_cancelled()``); ``on_cancel``, when a backend sets it, is called then too (a model process
    learns it at once instead of asking at every token).
    ``responses`` is set by the data plane for a decoupled model: the model answers through it (0..N
    responses, then the final flag) instead of through ``execute``'s return value.
    ``timestamps`` is a list only for a request being traced (``--trace-config``): the data plane and
    the scheduler append Triton's trace points to it as ``(name, time.monotonic_ns())``.
    ``output_memory``, when set, is where the response's outputs are going (:class:`OutputMemory`).
    ``regions`` names the client shared memory regions its inputs were read from: the data plane holds
    them while the request runs, as Triton does (an unregistration meanwhile waits for it).
    """

    model_name: str
    model_version: str = ""
    id: str = ""
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[RequestedOutput] | None = None
    parameters: Parameters = field(default_factory=dict)
    priority: int = 0
    timeout_us: int = 0
    sequence_id: int | str = 0
    sequence_start: bool = False
    sequence_end: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    cancelled: bool = False
    responses: ResponseSink | None = None
    on_cancel: Callable[[], None] | None = None
    timestamps: list[tuple[str, int]] | None = None
    output_memory: OutputMemory | None = None
    regions: list[str] | None = None

    def cancel(self) -> None:
        """The client gave up on the request: mark it, and tell the backend that asked to know."""
        self.cancelled = True
        if self.on_cancel is not None:
            self.on_cancel()

    def input(self, name: str) -> Tensor | None:
        for tensor in self.inputs:
            if tensor.name == name:
                return tensor
        return None

    @property
    def batch_size(self) -> int:
        """Size of the first dimension of the first input (1 for an empty request)."""
        if not self.inputs or not self.inputs[0].data.shape:
            return 1
        return int(self.inputs[0].data.shape[0])


@dataclass(slots=True)
class InferResponse:
    """The answer to one request: output tensors in the order the client should see them."""

    model_name: str
    model_version: str
    id: str = ""
    outputs: list[Tensor] = field(default_factory=list)
    parameters: Parameters = field(default_factory=dict)


#: Where a decoupled model's answers go, callable from any thread: each call carries one response, one
#: error, or neither (only the final flag); after a call with ``final`` the sink is never called again.
ResponseSink = Callable[[InferResponse | InferenceServerError | None, bool], None]


# ---- plain requests: tensors as the client's bytes -------------------------------------------------------


@dataclass(slots=True)
class WireTensor:
    """A tensor as a binary transport carries it: its wire bytes (see :mod:`naiad.codecs.wire`),
    not an array."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: bytes | memoryview
    parameters: Parameters = field(default_factory=dict)


@dataclass(slots=True)
class PlainRequest:
    """A request with none of the options that need the request's arrays or fields on its way: no
    parameters, no shared memory, no classification, fixed-size datatypes, each input's byte size
    matching its shape.  Most clients send only these.  A frontend worker does nothing with the
    tensors of such a request but copy their bytes to the engine, and the response's back to the
    client: it sends it without making arrays or an :class:`InferRequest`, and encodes the response
    from the engine's descriptors (``DataPlane.infer_plain``): about a tenth less CPU per gRPC call
    on a worker's core (``benchmarks/scaling/worker_core.py``)."""

    model_name: str
    model_version: str
    id: str
    inputs: list[WireTensor]
    outputs: list[RequestedOutput] | None = None


@dataclass(slots=True)
class PlainResponse:
    """The response to a :class:`PlainRequest`: outputs as wire bytes, valid only while the data
    plane's ``infer_plain`` encodes them (they may lie in shared memory that is reused after)."""

    model_name: str
    model_version: str
    id: str
    outputs: list[WireTensor]
    parameters: Parameters = field(default_factory=dict)
