"""A model process: hosts one Python model instance for the engine.

Forked from the template process (:mod:`naiad.backends.python.zygote`), or run as
``python -m naiad.backends.python.stub FD`` by a custom execution environment's Python, with one end
of a socket pair.  The first message says what to do: ``load`` an instance with the same
:class:`PythonModelInstance` the engine uses for a model that runs inside it, then serve ``execute``
messages until told to close or until the engine goes away (the socket closes), so a model process
never outlives its server; or ``auto_complete`` a configuration and leave.  SIGINT is ignored: a
Ctrl-C reaches the whole process group, and the engine decides when its instances finish.  The
model's BLS calls go to the engine over the same socket while an execution runs (a streamed call's
answers come back one by one as the callee sends them, see :class:`_Stream`); a decoupled model's
responses go over it whenever its threads send them, also after ``execute`` returned.
"""

from __future__ import annotations

import collections
import contextvars
import functools
import itertools
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from naiad.backends.base import Rescheduled
from naiad.backends.python import bls, logrelay, pb_utils, shm
from naiad.backends.python.custom_metrics import Publisher
from naiad.backends.python.host import auto_complete_config
from naiad.backends.python.instance import PythonModelInstance
from naiad.backends.python.messages import (
    PackedAnswer,
    Watch,
    Wire,
    bls_message,
    pack_answer,
    unpack_answer,
)
from naiad.backends.python.response import to_pb_response
from naiad.backends.python.spec import lone_spin_seconds, spin_seconds
from naiad.core.allocator import pin_thresholds
from naiad.core.datatypes import WIRE_DTYPE
from naiad.core.errors import ErrorCode, ErrorResponse, InferenceServerError
from naiad.core.request import InferRequest, InferResponse, RequestedOutput, Tensor

#: What the reader thread hands on once the engine is gone.
_GONE = object()
#: How long results of executions sent ahead may wait for later ones, to go in one write (s).
GATHER_S = 0.001

#: The channel the current call chain holds (see :class:`_Channel`).
_HOLDER: contextvars.ContextVar[_Channel | None] = contextvars.ContextVar(
    "naiad_channel_holder", default=None
)


class _Channel:
    """The socket to the server, shared by the model's threads: one exchange at a time.

    While an execution runs, the server reads what this process sends (questions, responses, BLS
    calls) until the ``results`` message.  A BLS call whose answer needs this very instance (the model
    calls itself) makes the server send a nested ``execute`` before the answer: it runs while the
    calling thread waits holding the channel, so the channel belongs to a call chain rather than a
    thread: code running for the holder (on its thread, or on a helper thread that runs an async
    ``execute`` for it, with its context) uses the channel without taking it again.
    """

    def __init__(self, conn: Wire, routed: bool) -> None:
        self.conn = conn
        #: ``execute`` messages that arrived while a question waited for its answer: the engine may
        #: send the next executions before the current one ends (see ``ProcessModelInstance``).
        self.waiting: collections.deque[tuple[Any, ...]] = collections.deque()
        self._lock = threading.Lock()
        #: Runs an ``execute`` message and returns the ``results`` message (set by :class:`_Worker`).
        self.execute: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None
        #: ``routed`` (a decoupled model): a reader thread reads the socket, since the model's threads
        #: ask questions after ``execute`` returned, while the main thread waits for the next
        #: execution.  It hands executions and ``close`` to the main thread (``work``) and the rest
        #: (answers, nested executions) to the thread that holds the channel (``replies``).
        self._work: queue.SimpleQueue[Any] | None = None
        self._replies: queue.SimpleQueue[Any] | None = None
        #: ``routed``: the requests whose final response has not been sent, and those of them the
        #: engine said were cancelled, by (execution key, index); the reader thread and the model's
        #: threads change them together.
        self._open: set[tuple[int, int]] = set()
        self._cancelled: set[tuple[int, int]] = set()
        self._flags = threading.Lock()
        #: The streamed BLS calls whose final answer has not come, by number (see :class:`_Stream`).
        self._streams: dict[int, _Stream] = {}
        self._numbers = itertools.count(1)
        #: Whether to watch for the next execution before blocking (see ``spec.SPIN_VARIABLE``).
        self._watch = Watch(spin_seconds(), lone_spin_seconds())
        if routed:
            self._work, self._replies = queue.SimpleQueue(), queue.SimpleQueue()
            threading.Thread(target=self._route, name="naiad-channel-reader", daemon=True).start()

    def _route(self) -> None:
        assert self._work is not None and self._replies is not None
        try:
            while True:
                message = self.conn.receive()
                kind = message[0] if type(message) is tuple and message else None
                if kind == "cancel":
                    self._cancel((message[1], message[2]))
                    continue
                if kind == "stream":
                    self._deliver(message)
                    continue
                if kind == "execute":  # known before any cancel of its requests is read
                    with self._flags:
                        self._open.update((message[1], index) for index in range(len(message[-1])))
                if kind in ("execute", "close") and not (kind == "execute" and message[2]):  # not nested
                    self._work.put(message)
                else:
                    self._replies.put(message)
        except (EOFError, OSError):
            self._work.put(_GONE)
            self._replies.put(_GONE)
            for stream in list(self._streams.values()):
                stream.put(("error", ErrorCode.INTERNAL.value, "the server is gone"), True)

    def _cancel(self, request: tuple[int, int]) -> None:
        with self._flags:
            if request in self._open:
                self._cancelled.add(request)

    def is_cancelled(self, key: int, index: int) -> bool:
        """Whether the engine said request ``index`` of execution ``key`` was cancelled (``routed``)."""
        return (key, index) in self._cancelled

    def closed(self, key: int, index: int) -> None:
        """Request ``index`` of execution ``key`` gets no further response: forget it."""
        with self._flags:
            self._open.discard((key, index))
            self._cancelled.discard((key, index))

    def _receive(self) -> Any:
        """The next reply to the holder of the channel."""
        if self._replies is None:
            return self.conn.receive()
        message = self._replies.get()
        if message is _GONE:
            raise EOFError
        return message

    def _reply(self, stream: _Stream | None = None) -> Any:
        """The next message for the holder of the channel, once answers of streamed calls and
        executions sent ahead that came first are put where they wait; with ``stream``, None as soon
        as that stream has an answer."""
        while True:
            if stream is not None and not stream.empty():
                return None
            message = self._receive()
            if type(message) is tuple:
                if message[0] == "stream":  # (only without a reader thread, which delivers them)
                    self._deliver(message)
                    continue
                if message[0] == "execute" and not message[2]:
                    self.waiting.append(message)  # a later execution, sent ahead
                    continue
            return message

    def _deliver(self, message: tuple[Any, ...]) -> None:
        """Hand ``("stream", number, answer, final)`` to its stream."""
        _, number, packed, final = message
        stream = self._streams.pop(number, None) if final else self._streams.get(number)
        if stream is not None:
            stream.put(packed, final)

    def _exclusive(self) -> _Holding:
        return _Holding(self)

    def ask(self, message: tuple[Any, ...]) -> Any:
        with self._exclusive():
            self.conn.send(message)
            return self._reply()

    def tell(self, message: tuple[Any, ...]) -> None:
        with self._exclusive():
            self.conn.send(message)

    def queue(self, message: tuple[Any, ...]) -> None:
        """Send ``message`` with the next ``flush`` (results of executions sent ahead).  Only the
        main thread's serving loop queues and flushes, outside any call chain: the lock alone
        keeps model threads' messages whole (no call chain to mark, a microsecond per execution)."""
        with self._lock:
            self.conn.queue(message)

    def flush(self) -> None:
        with self._lock:
            self.conn.flush()

    def executed(self, lone: bool) -> None:
        """An execution came (``lone``: the server's only request, see ``messages.Watch``)."""
        self._watch.executed(lone)

    def next_message(self, wait: bool) -> tuple[Any, ...] | None:
        """The next message from the engine; without ``wait``, only one already read (None if
        none: no system call to look for more, the results go out at once); EOFError once the
        engine is gone."""
        if self.waiting:
            return self.waiting.popleft()
        if self._work is not None:
            try:
                work: tuple[Any, ...] = self._work.get(block=wait)
            except queue.Empty:
                return None
            if work is _GONE:
                raise EOFError
            return work
        conn = self.conn
        watch = self._watch
        waiting_since = 0.0
        limit = watch.current()
        if wait and limit and not conn.has_message():
            waiting_since = time.perf_counter()
            if watch.worth_it(limit):
                conn.arrives_within(limit)  # the next execution is often near: no wake-up then
        while wait or conn.has_message():
            message: tuple[Any, ...] = conn.receive()
            if waiting_since:
                watch.waited(time.perf_counter() - waiting_since)
                waiting_since = 0.0
            if message[0] == "stream":  # a streamed call's answer nobody was reading for
                self._deliver(message)
                continue
            return message
        return None

    def call(self, request: InferRequest) -> PackedAnswer:
        """Forward a BLS call and wait for its answer."""
        answer: PackedAnswer = self._call(("bls", 0, bls_message(request), False))[1]
        return answer

    def control(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        """Forward a model loading API call and wait for the server's ``controlled`` reply."""
        return self._call(("control", message))

    def stream(self, request: InferRequest) -> bls.ResponseIterator:
        """Forward a streamed BLS call: its answers, as they come."""
        number = next(self._numbers)
        stream = self._streams[number] = _Stream(self, number, request.model_name)
        self._call(("bls", number, bls_message(request), True))
        return bls.ResponseIterator(stream, stream.cancel)

    def _call(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        """Send a BLS call and run the nested executions it brings (a call back into this
        instance) until the reply that ends the wait: the answer, or for a streamed call
        ``streaming`` (its answers then come on their own)."""
        with self._exclusive():
            self.conn.send(message)
            while True:
                reply = self._reply()
                if reply[0] == "execute":
                    assert self.execute is not None
                    self.conn.send(self.execute(reply))
                    continue
                return tuple(reply)

    def wait_stream(self, stream: _Stream) -> None:
        """Without a reader thread: read the socket until ``stream`` has an answer."""
        with self._exclusive():
            while (message := self._reply(stream)) is not None:
                if type(message) is tuple and message[0] == "execute":  # cannot come here: run it anyway
                    assert self.execute is not None
                    self.conn.send(self.execute(message))

    @property
    def routed(self) -> bool:
        return self._replies is not None

    def respond(
        self, key: int, index: int, answer: InferResponse | InferenceServerError | None, final: bool
    ) -> None:
        """Send one answer of request ``index`` of execution ``key`` (from any thread, also after
        ``execute`` returned)."""
        with self._exclusive():
            self.conn.send(("respond", key, index, pack_answer(answer), final))
        if final and self.routed:
            self.closed(key, index)


class _Holding:
    """The channel held by the current call chain for one exchange (a class, not a generator-based
    context manager: it is taken several times per execution)."""

    __slots__ = ("_channel", "_token")

    def __init__(self, channel: _Channel) -> None:
        self._channel = channel
        self._token: contextvars.Token[_Channel | None] | None = None

    def __enter__(self) -> None:
        channel = self._channel
        if _HOLDER.get() is channel:  # the call chain holding the channel is waiting for this code
            return
        channel._lock.acquire()
        self._token = _HOLDER.set(channel)

    def __exit__(self, *_: object) -> None:
        if self._token is not None:
            _HOLDER.reset(self._token)
            self._channel._lock.release()


class _RemoteRequest(InferRequest):
    """A request whose ``cancelled`` flag lives in the server: reading it asks over the socket."""

    __slots__ = ("_channel", "_index", "_key")
    _channel: _Channel
    _index: int
    _key: int

    @property
    def cancelled(self) -> bool:
        channel = self._channel
        if channel.routed:  # a decoupled model's: the engine says so when it happens
            return channel.is_cancelled(self._key, self._index)
        return bool(channel.ask(("is_cancelled", self._key, self._index)))

    @cancelled.setter
    def cancelled(self, value: bool) -> None:
        """The dataclass constructor sets it; the server's copy is the one that counts."""


def _request(
    message: tuple[Any, ...],
    region: shm.Region | None,
    arenas: dict[int, shm.Region],
    in_place: bool,
    channel: _Channel,
    key: int,
    index: int,
) -> _RemoteRequest:
    """Inputs in this process's own region are writable views: a model may change them in place, as
    in Triton.  So are those in a shared arena when ``in_place`` (see :class:`shm.Written`), which a
    decoupled model's are not: its threads may read an input after ``execute`` returned, past the
    undo of what it wrote, so its arena inputs are read-only and ``as_numpy`` copies them."""
    model_name, request_id, parameters, outputs, timeout_us, sequence_id, start, end, _, placements = message
    inputs = [
        Tensor(p[0], p[1], shm.view(region, p, arenas, writable=in_place or type(p[5]) is not int))
        for p in placements
    ]
    request = _RemoteRequest(
        model_name,
        id=request_id,
        inputs=inputs,
        outputs=None if outputs is None else [RequestedOutput(name) for name in outputs],
        parameters=parameters,
        timeout_us=timeout_us,
        sequence_id=sequence_id,
        sequence_start=start,
        sequence_end=end,
    )
    request._channel = channel
    request._key = key
    request._index = index
    return request


class _Stream:
    """A streamed BLS call's answers as they come from the server (:class:`bls.Answers`).

    The reader thread of a decoupled model's channel puts them here; without one, the model
    thread that waits for the next answer reads the socket itself (``_Channel.wait_stream``).
    """

    __slots__ = ("_channel", "_items", "_model_name", "_number", "finished")

    def __init__(self, channel: _Channel, number: int, model_name: str) -> None:
        self._channel = channel
        self._number = number
        self._model_name = model_name
        self._items: queue.SimpleQueue[bls.StreamItem] = queue.SimpleQueue()
        #: Whether the final answer came (cancelling then has nothing left to stop).
        self.finished = False

    def put(self, packed: PackedAnswer, final: bool) -> None:
        self.finished = self.finished or final
        self._items.put((unpack_answer(packed, self._model_name, ""), final))

    def empty(self) -> bool:
        return self._items.empty()

    def get(self) -> bls.StreamItem:
        if not self._channel.routed:
            self._channel.wait_stream(self)
        return self._items.get()

    def cancel(self) -> None:
        """Ask the server to cancel the call (its last answer then says CANCELLED)."""
        if not self.finished:
            self._channel.tell(("bls_cancel", self._number))


class _RemoteRunner:
    """The BLS runner of a model process (see ``pb_utils.ModelServices``): the server makes each
    call and sends its answers back, a streamed call's each as soon as the callee sent it."""

    def __init__(self, channel: _Channel) -> None:
        self._channel = channel

    def exec(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        core = bls.core_request(request)
        if decoupled:
            return self._channel.stream(core).first()
        return to_pb_response(unpack_answer(self._channel.call(core), core.model_name, ""))

    async def async_exec(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        import asyncio  # only an async model gets here (see bls.py on why not at the top)

        return await asyncio.to_thread(self.exec, request, decoupled)

    def model_control(self, message: tuple[Any, ...]) -> Any:
        """The server runs it (``bls.model_control``) and answers ``("controlled", ok, value)``."""
        _, ok, value = self._channel.control(message)
        if not ok:
            raise pb_utils.TritonModelException(value)
        return value


class _Outputs:
    """An output region this process writes an execution's outputs into, replaced by a larger one when
    needed.  The engine names the region each execution uses: one it reads no more."""

    def __init__(self) -> None:
        self.region: shm.Region | None = None

    def pack(
        self,
        results: list[Any],
        spans: shm.Spans,
        written: shm.Written,
        destinations: Sequence[dict[str, tuple[int, int, int]] | None] = (),
        arenas: dict[int, shm.Region] | None = None,
    ) -> tuple[Any, ...]:
        """``("results", path or None, size or None, results as the engine reads them)``; an output
        that lies in a shared arena (``spans``: an input returned, or a view of one) is not copied,
        unless the model wrote there (the worker's memory does not have what it wrote).  An output
        the engine reserved a block for where its response goes (``destinations``, per request) is
        written there, when it has that size, and goes back by reference too.  Outputs that all
        travel in the message (a few small ones) need none of that, nor the region."""
        if len(results) == 1 and isinstance(results[0], InferResponse):  # most executions: one request
            tensors = results[0].outputs
        else:
            tensors = [t for result in results if isinstance(result, InferResponse) for t in result.outputs]
        placements = shm.in_message(tensors)  # (no block is reserved for an output this small)
        if placements is not None:
            return ("results", None, None, _packed(results, placements))
        shared = shm.locate(spans, tensors)
        if shared is not None:
            for index, where in enumerate(shared):
                if where is not None and written.any(
                    spans[where[0]][0] + where[1], tensors[index].data.nbytes
                ):
                    shared[index] = None
        if arenas and any(destinations):
            shared = _write_to_destinations(results, tensors, shared, destinations, arenas)
        needed = shm.layout_size(tensors, shared)
        region = self.region
        fresh = None
        if needed and (region is None or needed > region.size):
            fresh = region = self.region = shm.Region.create(needed)
        packed = _packed(results, shm.place(region, tensors, shared))
        if fresh is None:
            return ("results", None, None, packed)
        return ("results", fresh.path, fresh.size, packed)


def _packed(results: list[Any], placements: list[shm.Placement]) -> list[tuple[Any, ...]]:
    """Each request's result as the engine reads it: its outputs' placements, or its error."""
    packed: list[tuple[Any, ...]] = []
    start = 0
    for result in results:
        if isinstance(result, InferResponse):
            end = start + len(result.outputs)
            packed.append(("ok", result.parameters, placements[start:end]))
            start = end
        elif isinstance(result, Rescheduled):
            packed.append(("rescheduled",))
        else:
            packed.append(("error", result.code.value, result.message, isinstance(result, ErrorResponse)))
    return packed


def _write_to_destinations(
    results: list[Any],
    tensors: list[Tensor],
    shared: list[shm.Shared] | None,
    destinations: Sequence[dict[str, tuple[int, int, int]] | None],
    arenas: dict[int, shm.Region],
) -> list[shm.Shared] | None:
    """Copy each output that does not lie in a shared arena already and has a destination of its
    exact size and type (the response arena of the frontend worker its request came from, mapped
    shared) there; ``shared`` with those outputs located there."""
    index = 0
    for result, chosen in zip(results, destinations, strict=True):
        if not isinstance(result, InferResponse):
            continue
        for tensor in result.outputs:
            where = chosen.get(tensor.name) if chosen else None
            data = tensor.data
            if (
                where is not None
                and (shared is None or shared[index] is None)
                and data.nbytes == where[2]
                and data.dtype == WIRE_DTYPE.get(tensor.datatype)
                and (arena := arenas.get(where[0])) is not None
            ):
                target: np.ndarray[Any, Any] = np.ndarray(data.shape, data.dtype, arena.buffer, where[1])
                np.copyto(target, data)
                if shared is None:
                    shared = [None] * len(tensors)
                shared[index] = (where[0], where[1])
            index += 1
    return shared


class _Worker:
    """Runs the executions the server sends, the nested ones included (see :class:`_Channel`).

    A decoupled model's execution ends when ``execute`` returns, as in Triton's stub: its threads
    keep sending the responses of earlier requests while the next executions run.
    """

    def __init__(self, channel: _Channel, instance: PythonModelInstance, decoupled: bool) -> None:
        self._channel = channel
        self._instance = instance
        self._decoupled = decoupled
        #: Input regions by slot, output regions by number (see :class:`ProcessModelInstance`).
        self._inputs: dict[int, shm.Region] = {}
        self._outputs: collections.defaultdict[int, _Outputs] = collections.defaultdict(_Outputs)
        #: The shared arenas the engine lent (mapped copy-on-write), by key, where they lie here, and
        #: what the model wrote there.
        self._arenas: dict[int, shm.Region] = {}
        self._spans: shm.Spans = {}
        self._written = shm.Written()
        channel.execute = self.execute

    def _learn(self, told: tuple[Any, ...]) -> None:
        """Map the shared arenas the engine told of, and forget those whose workers are gone."""
        new, gone = told
        for key in gone:
            self._arenas.pop(key, None)
            self._spans.pop(key, None)
        for key, path, size, shared in new:
            arena = self._arenas[key] = shm.Region.attach(path, size, private=not shared)
            self._spans[key] = arena.span()

    def _undo(self, requests: list[tuple[Any, ...]]) -> None:
        """Drop what the model wrote over its inputs in shared arenas (see :class:`shm.Written`)."""
        for request in requests:
            for placement in request[-1]:
                where = placement[5]
                if type(where) is int:
                    self._written.undo(
                        self._arenas[where], self._spans[where][0], placement[4], shm.extent(placement)
                    )

    def execute(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        """The ``results`` message for an ``execute`` message."""
        _, key, nested, slot, out, path, size, told, lone, requests = message
        channel = self._channel
        channel.executed(lone)
        try:
            if told is not None:
                self._learn(told)
            region = self._inputs.get(slot)
            if path is not None:
                region = shm.Region.attach(path, size)
                if not nested:  # a nested execution's region is its own; the outer one's inputs live on
                    self._inputs[slot] = region
            arenas, in_place = self._arenas, not self._decoupled
            batch = [
                _request(request, region, arenas, in_place, channel, key, i)
                for i, request in enumerate(requests)
            ]
            if self._decoupled:
                for index, request in enumerate(batch):
                    request.responses = functools.partial(channel.respond, key, index)
            written = self._written
            try:
                results = self._instance.execute(batch)
                written.hold()  # (the model returned: nothing writes its inputs until they are undone)
                destinations = [request[8] for request in requests] if arenas else ()
                reply = self._outputs[out].pack(results, self._spans, written, destinations, arenas)
            finally:
                if in_place and arenas:
                    self._undo(requests)
                written.release()
        except Exception as exc:  # a failure here must cost this batch, not the instance
            error = ("error", ErrorCode.INTERNAL.value, f"{type(exc).__name__}: {exc}")
            reply = ("results", None, None, [error] * len(requests))
        if self._decoupled:  # a request that failed gets no responses (its stream ends with the error)
            for index, result in enumerate(reply[3]):
                if result[0] == "error":
                    channel.closed(key, index)
        return reply

    def serve(self) -> None:
        """Run executions until told to close, or until the engine goes away.

        Results of executions the engine sent ahead are gathered and sent together once no further
        execution has arrived: one write, and one wake-up of the engine, for all of them; but only
        while that holds the oldest of them back less than :data:`GATHER_S` (judged by the last
        execution's length, as the next one's): a slow model's results go one by one, as each
        execution ends, and not all at the end of what was sent ahead (ten 2 s executions queued
        would otherwise all answer after 20 s).  A decoupled model's go at once: its threads go on
        after ``execute`` returned, and if they crash the process, the engine must know which
        executions had ended (their requests' streams then fail as streams, not as executions),
        whatever it sent ahead.
        """
        channel = self._channel
        unsent = False
        oldest = 0.0  # when the oldest result not sent yet was ready
        while True:
            try:
                message = channel.next_message(wait=not unsent)
                if message is None:
                    channel.flush()
                    unsent = False
                    continue
            except EOFError:  # the engine is gone: finalize and leave
                self._instance.close()
                return
            if message[0] == "close":
                self._instance.close()
                channel.tell(("closed",))
                return
            started = time.perf_counter()
            channel.queue(self.execute(message))
            ended = time.perf_counter()
            if not unsent:
                oldest = ended
            if self._decoupled or ended - oldest + (ended - started) > GATHER_S:
                channel.flush()
                unsent = False
            else:
                unsent = True


class _Answers:
    """Answers the engine's questions on the side channel (``logrelay.serve_questions``) while
    ``execute`` may be running: custom metrics that changed (sent before the answer), and the model's
    ``is_ready()``, on a thread of its own since it may take long (Triton's stub runs it on the thread
    that reads the engine's messages)."""

    def __init__(
        self, instance: PythonModelInstance, publisher: Publisher, pipe: logrelay.PipeHandler
    ) -> None:
        self._instance = instance
        self._publisher = publisher
        self._pipe = pipe

    def answer(self, question: tuple[Any, ...]) -> None:
        if question[0] == "metrics":
            self._publisher.send_changes()
            self._pipe.send(("answer", question[1], None))
        elif question[0] == "ready":
            threading.Thread(
                target=self._ready, args=(question[1],), name="naiad-is-ready", daemon=True
            ).start()

    def _ready(self, number: int) -> None:
        self._pipe.send(("answer", number, self._instance.readiness()))


def _failed(exc: BaseException) -> tuple[Any, ...]:
    if isinstance(exc, InferenceServerError):
        return ("failed", exc.code.value, exc.message)
    return ("failed", ErrorCode.INTERNAL.value, f"{type(exc).__name__}: {exc}")


def _auto_complete(conn: Wire, message: tuple[Any, ...]) -> int:
    _, model_file, model_name, config_json = message
    try:
        conn.send(("completed", auto_complete_config(model_file, model_name, config_json)))
    except Exception as exc:
        conn.send(_failed(exc))
        return 1
    return 0


def run(conn: Wire, log: int) -> int:
    """Do what the engine's first message says; the exit status.  Log records go to the engine
    through the pipe ``log`` (see :mod:`naiad.backends.python.logrelay`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pipe = logrelay.install(log)
    pin_thresholds()  # the model process moves the same tensors as the engine (see naiad.core.allocator)
    try:
        message = conn.receive()
    except EOFError:
        return 0
    if message[0] == "auto_complete":
        return _auto_complete(conn, message)
    _, spec = message
    # This process's services: its model's custom metrics go to the engine through the pipe, and
    # its BLS calls (once it is served) through the channel; bound for the whole process, threads
    # the model starts included.
    publisher = Publisher(pipe.send)
    services = pb_utils.ModelServices(publisher.store, model_dir=spec.version_dir)
    pb_utils.bind_process(services)
    # As Triton's stub does, the model's version folder and the model's folder stay importable for
    # the life of this process, which serves only this model (``unittest.main("model")`` in a model,
    # as NVIDIA's qa models call it, imports its file again by that name)
    sys.path += [str(spec.model_file.parent), str(spec.model_file.parent.parent)]
    # and the model sees the ``sys.argv`` of Triton's embedded interpreter, not this process's
    # (``unittest.main`` in a model reads its arguments as test names)
    sys.argv = [""]
    try:
        instance = PythonModelInstance(spec, services)
    except Exception as exc:
        conn.send(_failed(exc))
        return 1
    conn.send(("loaded", instance.checks_readiness))
    answers = _Answers(instance, publisher, pipe)
    threading.Thread(
        target=logrelay.serve_questions, args=(log, answers.answer), name="naiad-questions", daemon=True
    ).start()
    channel = _Channel(conn, spec.decoupled)
    services.bls = _RemoteRunner(channel)
    _Worker(channel, instance, spec.decoupled).serve()
    return 0


def main(argv: list[str]) -> int:
    return run(Wire(socket.socket(fileno=int(argv[1]))), int(argv[2]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
