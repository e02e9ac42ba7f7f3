"""Requests and responses to and from their messages: tensors into an arena, descriptors out of it.

The writing side copies a tensor's wire bytes (:mod:`naiad.codecs.wire`) into its arena once; the
reading side wraps them as numpy views without a copy.  An output whose memory already lies in the
request arena (a model that returns an input, or a view of one) is sent as a descriptor into that
arena and not copied at all.  BYTES tensors are length-prefixed in the arena and decoded into objects
by the reader.

Small tensors (up to :data:`INLINE_MAX` bytes) travel inside the message instead: copying a few KiB
costs less than allocating a block, and a response block would cost its reader a ``Release`` message
back, which under light load is a wake-up of the engine of its own.

An output a backend computed into memory of its own would be copied into the response arena by the
engine's event loop, which every request of every model waits on: an :class:`OutputPlacer` lets the
backend's own thread copy it there instead (measured with a 1x3x224x224 FP32 ONNX identity, about a
third of the loop's time per request), and the response then names the block it was copied into.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from naiad.codecs import bytes_tensor
from naiad.codecs.wire import wire_data
from naiad.core import datatypes
from naiad.core.request import (
    InferRequest,
    InferResponse,
    PlainRequest,
    PlainResponse,
    RequestedOutput,
    Tensor,
    WireTensor,
)
from naiad.ipc.arena import Arena, LentTensor, lent_at
from naiad.ipc.messages import (
    INLINE,
    REQUEST_ARENA,
    RESPONSE_ARENA,
    OutputRef,
    RequestMsg,
    ResponseMsg,
    TensorRef,
)

#: Tensors of at most this many bytes are sent inside their message, not through an arena.
INLINE_MAX = 4096


def _put(tensor: Tensor, arena: Arena, which: int, blocks: list[int]) -> TensorRef:
    data = wire_data(tensor)
    nbytes = data.nbytes if isinstance(data, np.ndarray) else len(data)
    offset = arena.allocate(nbytes) if nbytes > INLINE_MAX else None
    shape = list(tensor.data.shape)
    if offset is None:
        inline = data.tobytes() if isinstance(data, np.ndarray) else data
        return TensorRef(tensor.name, tensor.datatype, shape, INLINE, 0, nbytes, inline, tensor.parameters)
    if nbytes:
        arena.write(offset, data)
    blocks.append(offset)
    return TensorRef(tensor.name, tensor.datatype, shape, which, offset, nbytes, None, tensor.parameters)


def _array(ref: TensorRef, arena: Arena | None) -> np.ndarray[Any, Any]:
    """The tensor a descriptor names (a view when it is in ``arena``, decoded objects for BYTES)."""
    if ref.inline is not None or arena is None:
        buffer: Any = ref.inline or b""
    else:
        buffer = arena.view[ref.offset : ref.offset + ref.nbytes]
    if ref.datatype == "BYTES":
        shape = tuple(ref.shape)
        return bytes_tensor.deserialize(buffer, math.prod(shape), ref.name).reshape(shape)
    # one call, not ``frombuffer`` and ``reshape``: half the cost, per tensor of every request
    return np.ndarray(ref.shape, datatypes.WIRE_DTYPE[ref.datatype], buffer)


# ---- worker: requests out, responses in -----------------------------------------------------------------


def request_message(request: InferRequest, arena: Arena, blocks: list[int]) -> RequestMsg:
    """``request`` as a message, its inputs written into the request arena (their blocks in ``blocks``)."""
    return RequestMsg(
        request.model_name,
        request.model_version,
        request.id,
        [_put(tensor, arena, REQUEST_ARENA, blocks) for tensor in request.inputs],
        None if request.outputs is None else [OutputRef(o.name, o.parameters) for o in request.outputs],
        request.parameters,
        request.priority,
        request.timeout_us,
        request.sequence_id,
        request.sequence_start,
        request.sequence_end,
        request.headers,
        request.timestamps is not None,
        regions=request.regions,
    )


def plain_request_message(
    request: PlainRequest, headers: dict[str, str], arena: Arena, blocks: list[int]
) -> RequestMsg:
    """A plain request as a message: its inputs' wire bytes inside it, or written into the request
    arena (their blocks in ``blocks``) when larger than :data:`INLINE_MAX`, as :func:`request_message`
    places an :class:`InferRequest`'s; the fields a plain request has not are their defaults."""
    inputs = []
    for tensor in request.inputs:
        data = tensor.data
        nbytes = len(data)
        shape = list(tensor.shape)
        offset = arena.allocate(nbytes) if nbytes > INLINE_MAX else None
        if offset is None:
            inputs.append(TensorRef(tensor.name, tensor.datatype, shape, INLINE, 0, nbytes, bytes(data)))
            continue
        arena.write(offset, data)
        blocks.append(offset)
        inputs.append(TensorRef(tensor.name, tensor.datatype, shape, REQUEST_ARENA, offset, nbytes))
    outputs = None if request.outputs is None else [OutputRef(o.name) for o in request.outputs]
    return RequestMsg(
        request.model_name,
        request.model_version,
        request.id,
        inputs,
        outputs,
        {},
        0,
        0,
        0,
        False,
        False,
        headers,
        False,
    )


def plain_response(message: ResponseMsg, requests: Arena, responses: Arena) -> PlainResponse:
    """The response a message describes, its outputs as their wire bytes where they lie (inside the
    message, or views of the arenas: valid until the caller releases the blocks).  A BYTES output is
    length-prefixed in the arena as on the wire, so every datatype is passed on as it lies."""
    outputs = []
    for ref in message.outputs:
        data: bytes | memoryview
        if ref.inline is not None:
            data = ref.inline
        else:
            arena = responses if ref.arena == RESPONSE_ARENA else requests
            data = arena.view[ref.offset : ref.offset + ref.nbytes]
        outputs.append(WireTensor(ref.name, ref.datatype, tuple(ref.shape), data, ref.parameters))
    return PlainResponse(message.model_name, message.model_version, message.id, outputs, message.parameters)


def response_from(
    message: ResponseMsg,
    requests: Arena,
    responses: Arena,
    keep: Callable[[np.ndarray[Any, Any], int, int], None],
) -> InferResponse:
    """The response a message describes.  ``keep(array, arena, offset)`` is called for every view into
    an arena, so the caller can hold the block until the view is gone."""
    outputs: list[Tensor] = []
    for ref in message.outputs:
        arena = responses if ref.arena == RESPONSE_ARENA else requests if ref.arena == REQUEST_ARENA else None
        if arena is None or ref.datatype == "BYTES":
            data = _array(ref, arena)
            if arena is not None and ref.arena == RESPONSE_ARENA:
                keep(data, RESPONSE_ARENA, ref.offset)  # decoded already: nothing holds the block
        else:
            flat = arena.array(ref.offset, ref.nbytes, datatypes.WIRE_DTYPE[ref.datatype])
            keep(flat, ref.arena, ref.offset)
            data = flat.reshape(ref.shape)
        outputs.append(Tensor(ref.name, ref.datatype, data, ref.parameters))
    return InferResponse(message.model_name, message.model_version, message.id, outputs, message.parameters)


# ---- engine: requests in, responses out -----------------------------------------------------------------


class OutputPlacer:
    """A worker's request's :class:`~naiad.core.request.OutputMemory`: blocks of the worker's response
    arena, written by the backend's thread and named by the response (:func:`response_message`).

    A block placed but not named by the response (an output the request did not ask for, a failed
    or cancelled request) is freed by :meth:`close`, which the engine calls once the request is
    answered; a placement after that gets ``None``.  A block still being written when the request is
    answered (a timeout, a cancellation) is freed by the placement itself once its copy ends, never
    under it.  ``lock`` (one per worker: a placer is made for every request, and most never place
    anything) guards the bookkeeping, not the copies, so two instances copy at once.  A model process
    writes into blocks :meth:`reserve` took for it, in the arena's ring for long-lived blocks, which
    :meth:`release` hands to the response (or frees) once its execution ended."""

    __slots__ = ("_arena", "_closed", "_lock", "_made", "_placed", "_requests", "key")

    def __init__(
        self, arena: Arena, lock: threading.Lock, key: int = 0, requests: Arena | None = None
    ) -> None:
        self._arena = arena
        #: The worker's request arena, where the request's large inputs lie (see :meth:`kept`).
        self._requests = requests
        self._lock = lock
        #: The key the arena is lent to model processes by (``SharedArenas``; 0: not lent).
        self.key = key
        #: Offset -> address of the block's data, or 0 while it is being written; ``None`` until the
        #: first placement.
        self._placed: dict[int, int] | None = None
        #: The arrays :meth:`place` made, with their blocks' offsets: a response naming one is known
        #: by the array itself (:meth:`take`), without numpy's look-up of its address.
        self._made: list[tuple[np.ndarray[Any, Any], int]] | None = None
        self._closed = False

    def reserve(self, nbytes: int) -> int | None:
        """A block of ``nbytes`` that a model process may write an output into (see ``release``), in
        the arena's ring for long-lived blocks (see ``naiad.ipc.arena.Arena``); its offset, or ``None``
        (small enough to travel inside the message, answered already, or no room)."""
        if nbytes <= INLINE_MAX:
            return None
        with self._lock:
            if self._closed:
                return None
            offset = self._arena.reserve(nbytes)
            if offset is None:
                return None
            if self._placed is None:
                self._placed = {}
            self._placed[offset] = 0
        return offset

    def release(self, offsets: list[int]) -> None:
        """The execution that could write these reserved blocks ended (answered, failed, or its process
        died): the response may name them now, or, if the request was answered meanwhile, they are
        freed.  Until then no answer frees them, since the model process may still be writing."""
        arena = self._arena
        with self._lock:
            placed = self._placed
            assert placed is not None
            for offset in offsets:
                if self._closed:
                    del placed[offset]
                    arena.free(offset)
                else:
                    placed[offset] = arena.base + offset

    def kept(self, array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        if self._arena.holds(array) or (self._requests is not None and self._requests.holds(array)):
            return array.copy()
        return array

    def place(self, datatype: str, array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
        nbytes = array.nbytes
        if nbytes <= INLINE_MAX or datatype == "BYTES" or array.dtype != datatypes.WIRE_DTYPE.get(datatype):
            return None
        arena = self._arena
        with self._lock:
            if self._closed:
                return None
            offset = arena.allocate(nbytes)
            if offset is None:
                return None
            if self._placed is None:
                self._placed = {}
            self._placed[offset] = 0
        target = arena.array(offset, nbytes, array.dtype).reshape(array.shape)
        np.copyto(target, array)  # (without the GIL, for tensors this large)
        with self._lock:
            if self._closed:  # answered meanwhile: nobody will name or free it but us
                del self._placed[offset]
                arena.free(offset)
                return None
            self._placed[offset] = arena.base + offset
            if self._made is None:
                self._made = []
            self._made.append((target, offset))
        return target

    def take_made(self, data: np.ndarray[Any, Any]) -> int | None:
        """:meth:`take` for an array :meth:`place` returned (``None`` for any other)."""
        made = self._made
        if made:
            for index, (target, offset) in enumerate(made):
                if target is data:
                    del made[index]
                    return self.take_at(offset)
        return None

    def take(self, data: np.ndarray[Any, Any]) -> int | None:
        """The offset of the block ``data`` was placed in (the response names it from now on: the
        worker frees it), or ``None`` if it is not one of this placer's; found by its address (a view
        of an array :meth:`place` made: that array itself is found by :meth:`take_made`)."""
        if not self._placed or not data.flags.c_contiguous:
            return None
        address = int(data.ctypes.data)
        with self._lock:
            for offset, start in self._placed.items():
                if start == address:
                    del self._placed[offset]
                    return offset
        return None

    def take_at(self, offset: int) -> int | None:
        """:meth:`take` for data known to start at ``offset`` in the arena (a model process's output
        written into a block reserved for it, see :class:`~naiad.ipc.arena.LentTensor`)."""
        if not self._placed:
            return None
        with self._lock:
            if self._placed.get(offset):  # (0 while being written)
                del self._placed[offset]
                return offset
        return None

    def close(self) -> None:
        """The request is answered: free what was placed and not named, and place nothing more."""
        if self._placed is None:  # nothing placed yet: a placement starting now sees ``_closed``
            self._closed = True
            return
        with self._lock:
            self._closed = True
            self._made = None
            done = [offset for offset, address in self._placed.items() if address]
            for offset in done:
                del self._placed[offset]
                self._arena.free(offset)


def request_from(message: RequestMsg, arena: Arena, key: int = 0) -> InferRequest:
    """The request a message describes; its inputs are views into the request arena (or into
    the message, for small ones), those in the arena made knowing where when it is lent to model
    processes by ``key`` (:class:`~naiad.ipc.arena.LentTensor`)."""
    outputs = message.outputs
    inputs: list[Tensor] = []
    for ref in message.inputs:
        datatype = ref.datatype
        if ref.inline is not None and datatype != "BYTES":  # most inputs: a few bytes in the message
            data = np.ndarray(ref.shape, datatypes.WIRE_DTYPE[datatype], ref.inline)
            inputs.append(Tensor(ref.name, datatype, data, ref.parameters))
            continue
        data = _array(ref, arena)  # (in the arena, or BYTES)
        if key and datatype != "BYTES":
            inputs.append(LentTensor(ref.name, datatype, data, ref.parameters, (data, key, ref.offset)))
        else:
            inputs.append(Tensor(ref.name, datatype, data, ref.parameters))
    return InferRequest(
        message.model_name,
        message.model_version,
        message.id,
        inputs,
        None if outputs is None else [RequestedOutput(o.name, o.parameters) for o in outputs],
        message.parameters,
        message.priority,
        message.timeout_us,
        message.sequence_id,
        message.sequence_start,
        message.sequence_end,
        message.headers,
        timestamps=[] if message.traced else None,
        regions=message.regions,
    )


def _named(
    tensor: Tensor, requests: Arena, placer: OutputPlacer | None, request_key: int
) -> tuple[int, int | None]:
    """Where an output already lies that its response can name instead of copying it: the request
    arena (an input, or a view of one) or a block ``placer`` placed or reserved (the arena and the
    offset; ``None``: nowhere).  Known without numpy's address look-up where the tensor or the array
    says so (a :class:`~naiad.ipc.arena.LentTensor`, or an array :meth:`OutputPlacer.place` made),
    looked for by its address otherwise."""
    lent = lent_at(tensor)
    if lent is not None:
        if request_key and lent[0] == request_key:
            return REQUEST_ARENA, lent[1]
        if placer is not None and placer.key and lent[0] == placer.key:
            return RESPONSE_ARENA, placer.take_at(lent[1])
    data = tensor.data
    if placer is not None:
        taken = placer.take_made(data)
        if taken is not None:
            return RESPONSE_ARENA, taken
    offset = requests.contains(data)
    if offset is None and placer is not None:
        return RESPONSE_ARENA, placer.take(data)
    return REQUEST_ARENA, offset


def response_message(
    response: InferResponse,
    requests: Arena,
    responses: Arena,
    placer: OutputPlacer | None = None,
    request_key: int = 0,
) -> ResponseMsg:
    """``response`` as a message: outputs that are views into the request arena by reference, those
    ``placer`` placed in the response arena by their block, the others written into the response
    arena here (the worker releases the response arena's blocks).  ``request_key``: the key the
    request arena is lent to model processes by, whose outputs lying there come back knowing where
    (:class:`~naiad.ipc.arena.LentTensor`)."""
    blocks: list[int] = []
    outputs: list[TensorRef] = []
    for tensor in response.outputs:
        data = tensor.data
        datatype = tensor.datatype
        if datatype != "BYTES" and data.dtype == datatypes.WIRE_DTYPE.get(datatype):
            nbytes = data.nbytes
            if nbytes <= INLINE_MAX:  # most outputs: a few bytes in the message, as ``_put`` sends them
                inline = data.tobytes()
                outputs.append(
                    TensorRef(
                        tensor.name, datatype, list(data.shape), INLINE, 0, nbytes, inline, tensor.parameters
                    )
                )
                continue
            which, offset = _named(tensor, requests, placer, request_key)
            if offset is not None:
                outputs.append(
                    TensorRef(
                        tensor.name,
                        datatype,
                        list(data.shape),
                        which,
                        offset,
                        nbytes,
                        None,
                        tensor.parameters,
                    )
                )
                continue
        outputs.append(_put(tensor, responses, RESPONSE_ARENA, blocks))
    return ResponseMsg(response.model_name, response.model_version, response.id, outputs, response.parameters)
