"""The messages between the engine and a model process, apart from tensors (see :mod:`.shm`).

A request crosses as its fields and its inputs' placements in shared memory; answers that a model
process sends while an execution runs (a decoupled model's responses, BLS answers) and BLS requests
travel as tuples whose tensors are pickled with them: they are rare next to executions.
"""

from __future__ import annotations

import collections
import os
import pickle
import select
import socket
import struct
import time
from typing import Any

import numpy as np

from naiad.backends.python import shm
from naiad.core.errors import ErrorCode, ErrorResponse, InferenceServerError
from naiad.core.request import InferRequest, InferResponse, RequestedOutput, Tensor


def request_message(
    request: InferRequest,
    placements: list[shm.Placement],
    destinations: dict[str, tuple[int, int, int]] | None = None,
) -> tuple[Any, ...]:
    """The fields of ``request`` a Python model can read, where its outputs may go (output name ->
    ``(lent arena key, offset, bytes)``, see ``ProcessModelInstance._reserve``), and its inputs'
    placements (last)."""
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
        destinations,
        placements,
    )


#: An answer as it crosses the pipe: ``("ok", parameters, [(name, datatype, array)])``,
#: ``("error", code, message)``, or ``None`` (a decoupled model's final flag without a response).
#: An object array (BYTES) goes as ``(name, datatype, shape, items)``: pickling a numpy object array
#: costs ten times its few items (a language model's token text: one per response).
PackedAnswer = tuple[Any, ...] | None


def pack_answer(answer: InferResponse | InferenceServerError | None) -> PackedAnswer:
    if answer is None:
        return None
    if isinstance(answer, InferenceServerError):
        return ("error", answer.code.value, answer.message, isinstance(answer, ErrorResponse))
    return ("ok", answer.parameters, [_pack_tensor(t) for t in answer.outputs])


def _pack_tensor(tensor: Tensor) -> tuple[Any, ...]:
    data = tensor.data
    if data.dtype.kind == "O":
        return (tensor.name, tensor.datatype, data.shape, data.ravel().tolist())
    return (tensor.name, tensor.datatype, data)


def unpack_answer(
    packed: PackedAnswer, model_name: str, model_version: str
) -> InferResponse | InferenceServerError | None:
    if packed is None:
        return None
    if packed[0] == "error":  # (the model's own error response stays one)
        kind = ErrorResponse if len(packed) > 3 and packed[3] else InferenceServerError
        return kind(packed[2], ErrorCode(packed[1]))
    outputs = [_unpack_tensor(tensor) for tensor in packed[2]]
    return InferResponse(model_name, model_version, "", outputs, packed[1])


def _unpack_tensor(packed: tuple[Any, ...]) -> Tensor:
    if len(packed) == 3:
        return Tensor(*packed)
    name, datatype, shape, items = packed
    array = np.empty(len(items), dtype=np.object_)
    for index, item in enumerate(items):  # one by one: an item may itself be a sequence
        array[index] = item
    return Tensor(name, datatype, array.reshape(shape))


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


_HEADER = struct.Struct("!I")
_READ_SIZE = 1 << 16


#: Executions in a row the engine must call lone (the server's only request in flight) before a model
#: process watches for the next one with its longer watch (``spec.LONE_SPIN_VARIABLE``): under load a
#: lone execution happens now and then, and one alone must not start a long watch.
LONE_STREAK = 8


class Watch:
    """Whether to watch a socket for a moment before blocking on it (:meth:`Wire.arrives_within`).

    A watch pays when the message comes within it (a model process answering a light execution; the
    next execution of a client calling one request at a time) and only costs when it does not: a
    model called a few hundred times a second, one of many on a busy server, would burn the whole
    watch after every execution.  So a side watches only while its last wait was shorter than the
    watch: the wait is timed whether it watched or blocked, so one short wait turns watching back on.
    A model process watches longer (``lone``) after :data:`LONE_STREAK` executions in a row that were
    the server's only request (see :meth:`executed`).
    """

    __slots__ = ("_last", "_streak", "limit", "lone")

    def __init__(self, limit: float, lone: float = 0.0) -> None:
        #: Seconds a watch lasts at most; 0 never watches.
        self.limit = limit
        #: Seconds after a streak of lone executions (never shorter than ``limit``; 0 if it is 0).
        self.lone = max(lone, limit) if limit else 0.0
        self._last = 0.0
        self._streak = 0

    def current(self) -> float:
        """How long the next watch may last."""
        return self.lone if self._streak >= LONE_STREAK else self.limit

    def worth_it(self, limit: float | None = None) -> bool:
        """Whether to watch for at most ``limit`` (``limit`` by default): the last wait was shorter."""
        return self._last < (self.limit if limit is None else limit)

    def waited(self, seconds: float) -> None:
        """The last wait, watched or blocked, took ``seconds``."""
        self._last = seconds

    def executed(self, lone: bool) -> None:
        """An execution came; ``lone``: the engine had no other request in flight when it sent it."""
        self._streak = self._streak + 1 if lone else 0


class Wire:
    """Pickled messages on a stream socket, in frames of a 4-byte length and a pickled list.

    Sending can gather several messages into one write (``queue`` then ``flush``), and reading takes
    every message that has arrived with one read (``receive_ready``): under load both sides then pay
    one system call, and one wake-up, for several executions rather than one each.  Messages queued
    together are pickled together, as one list: one pickling and one unpickling per write instead of
    one per message, and the strings the messages share (names, datatypes) are made once.
    ``receive`` blocks for the next message.  Messages never cross threads half-read: the engine
    reads an instance's wire from one thread at a time, and a model process under its channel's lock.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._inbox = bytearray()
        #: Messages of a frame already unpickled, not yet taken.
        self._received: collections.deque[Any] = collections.deque()
        self._outbox: list[Any] = []
        #: Frames (or their ends) not written yet, in order (see ``flush_ready``).
        self._unsent: collections.deque[memoryview] = collections.deque()
        #: The peer closed while ``arrives_within`` watched: the next read reports EOF.
        self._closed = False

    def fileno(self) -> int:
        return self._sock.fileno()

    def send(self, message: Any) -> None:
        """Send ``message`` now (after whatever is queued)."""
        self._outbox.append(message)
        self.flush()

    def queue(self, message: Any) -> None:
        """Send ``message`` with the next ``flush``: it is pickled then, so it must not change meanwhile."""
        self._outbox.append(message)

    def flush(self) -> None:
        """Send what is queued (and anything ``flush_ready`` left unsent), waiting until all of it went."""
        self._frame()
        self._write_unsent()

    def flush_ready(self) -> bool:
        """Send what is queued as far as the socket takes it now, without waiting; False if some is
        left, sent in order before anything later (by the next ``flush_ready`` or ``flush``).

        The event loop's way to send: a frame larger than what the socket holds (BYTES tensors
        travel in the message) to a model process busy with an earlier execution would otherwise
        hold the loop, and every other model's requests, until that execution ends and the process
        reads again.  The loop sends the rest when the socket is writable."""
        self._frame()
        return self._send_ready(socket.MSG_DONTWAIT)

    def _frame(self) -> None:
        outbox = self._outbox
        if outbox:
            self._outbox = []
            payload = pickle.dumps(outbox, protocol=pickle.HIGHEST_PROTOCOL)
            self._unsent.append(memoryview(_HEADER.pack(len(payload)) + payload))

    def _send_ready(self, flags: int) -> bool:
        """Write what is unsent; False once the socket takes no more without waiting (at once with
        ``MSG_DONTWAIT``, else only on a socket an event loop made non-blocking)."""
        unsent, sock = self._unsent, self._sock
        while unsent:
            view = unsent[0]
            try:
                sent = sock.send(view, flags)
            except BlockingIOError:
                return False
            if sent < len(view):
                unsent[0] = view[sent:]
            else:
                unsent.popleft()
        return True

    def _write_unsent(self) -> None:
        """All that is unsent, on a blocking socket or on one an event loop made non-blocking (libuv
        does so to the sockets it watches: the engine's end of a model process driven from the loop).
        A frame larger than what the socket holds waits for the peer to read, taking in what the peer
        sends meanwhile: a model process writing its results while the engine writes an execution
        must not leave both waiting for the other.  (``sendall`` on a non-blocking socket fails
        midway, losing how much it sent.)  A blocking socket waits in ``send`` instead, without
        reading: another thread may be reading it (a decoupled model's reader, on either side)."""
        sock = self._sock
        while not self._send_ready(0):
            readable, _, _ = select.select([sock], [sock], [])
            if readable:
                try:
                    self._fill(blocking=False)
                except EOFError:
                    raise BrokenPipeError("the peer closed its end") from None

    def receive(self) -> Any:
        """The next message, waiting for it; EOFError once the peer closed."""
        while True:
            message = self._take()
            if message is not _NOTHING:
                return message
            self._fill(blocking=True)

    def receive_ready(self) -> list[Any]:
        """Every message that has arrived (one read); EOFError once the peer closed and none is left."""
        closed = False
        try:
            self._fill(blocking=False)
        except EOFError:
            closed = True
        messages = list(self._received)
        self._received.clear()
        while self._unpickle():
            messages.extend(self._received)
            self._received.clear()
        if closed and not messages:
            raise EOFError
        return messages

    def has_message(self) -> bool:
        """Whether a whole message is buffered (``receive`` would not wait)."""
        if self._received:
            return True
        inbox = self._inbox
        return len(inbox) >= 4 and len(inbox) >= 4 + _HEADER.unpack_from(inbox)[0]

    def poll(self, timeout: float | None) -> bool:
        """Whether a message is buffered or data arrives within ``timeout`` seconds."""
        return self.has_message() or bool(select.select([self._sock], [], [], timeout)[0])

    def arrives_within(self, seconds: float) -> bool:
        """Whether data arrives within ``seconds``, watched without sleeping (a non-blocking read,
        then ``sched_yield``, in a loop): what arrives is buffered, EOF included (``receive`` then
        raises).  On this kind of machine a process that blocks and is woken costs both sides far
        more (an idle CPU's wake-up, cold caches) than the few reads of a short wait; the yield
        lets a process that shares the core run meanwhile.  False after ``seconds``: block then."""
        deadline = time.perf_counter() + seconds
        sock = self._sock
        inbox = self._inbox
        while True:
            try:
                data = sock.recv(_READ_SIZE, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if time.perf_counter() >= deadline:
                    return False
                os.sched_yield()
                continue
            if not data:
                self._closed = True
                return True
            inbox += data
            return True

    def _take(self) -> Any:
        received = self._received
        if received or self._unpickle():
            return received.popleft()
        return _NOTHING

    def _unpickle(self) -> bool:
        """Move the messages of the first whole frame buffered to ``_received``; False if none is."""
        inbox = self._inbox
        if len(inbox) < 4:
            return False
        (size,) = _HEADER.unpack_from(inbox)
        if len(inbox) < 4 + size:
            return False
        self._received.extend(pickle.loads(memoryview(inbox)[4 : 4 + size]))
        del inbox[: 4 + size]
        return True

    def _fill(self, blocking: bool) -> None:
        if self._closed:
            raise EOFError
        try:
            data = self._sock.recv(_READ_SIZE, 0 if blocking else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        if not data:
            raise EOFError
        self._inbox += data

    def close(self) -> None:
        self._sock.close()


_NOTHING = object()
