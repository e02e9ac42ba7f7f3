"""A Python model instance in a model process of its own: a crash, a hang or runaway memory costs
only that model's requests, never the server.

Like Triton's stub processes, each instance is a child interpreter (:mod:`naiad.backends.python.stub`,
forked from the template process of :mod:`naiad.backends.python.zygote`) that loads the model with
the same :class:`~naiad.backends.python.instance.PythonModelInstance` the engine would use, so both
behave the same way.  Per execution the engine writes the input tensors into a shared-memory region
(a large one that a frontend worker put in its request arena is not copied: the model process maps
the arena and reads it there) and sends their placement and the request fields through a socket; the
model process answers with its outputs placed in an output region of its own, which the engine reads
in place (see :mod:`naiad.backends.python.shm`), so the engine's cost per execution does not grow
with the tensors.  ``is_cancelled()`` in
the model process asks the engine, which answers from the live request; a decoupled model's reads a
flag there instead, which the engine sets by a message when the request is cancelled (such a model
asks before every token it makes, and a question and its answer per token cost both processes more
than the token's own response).  While an execution runs, the
model process forwards the model's BLS calls, which the engine makes on the instance's thread and
answers (a streamed call's answers each as the callee sends it, relayed by a thread of its own, and
the model's ``cancel()`` of it comes back).  A decoupled model's process is read by a thread of its
own (``_read``): as in Triton's stub, the instance is free once ``execute`` returns, while the
model's threads keep sending the responses of earlier requests (and asking whether they were
cancelled).  ``execute`` blocks in socket I/O,
releasing the GIL, so N instances compute in N processes at once.  A single instance whose model
makes no BLS calls is driven from the event loop instead (``start_on_loop``), with executions sent
ahead under load (a decoupled model's too: its reader thread delivers their responses and results,
so a burst of requests reaches the model without a round trip per execution).  Log records, custom
metrics and the engine's questions that cannot wait for an execution to end (is the model ready?) go
through a side channel of their own (:mod:`naiad.backends.python.logrelay`).

A watcher thread per instance learns at once that the model process ended (the template reports its
exit status), kills it when it crosses the model's memory limit or runs one execution past the
model's timeout, and restarts it (``initialize`` again) with a growing delay.  The requests the
process held fail with Triton's message, ``Stub process '<instance>' is not healthy.``, followed by
what happened; so do requests that arrive while it restarts.  After :data:`MAX_CRASHES` ends within
:data:`CRASH_WINDOW_S` the instance stops restarting and reports the model UNAVAILABLE with the
reason (:class:`~naiad.backends.base.InstanceHealth`); loading the model again starts afresh.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from multiprocessing.connection import wait
from typing import Any

import numpy as np

from naiad.backends.base import ExecuteResult, InstanceHealth, Rescheduled
from naiad.backends.python import bls, pb_utils, shm
from naiad.backends.python.custom_metrics import CustomMetrics
from naiad.backends.python.instance import mentions_requests
from naiad.backends.python.launcher import Launcher
from naiad.backends.python.messages import Watch, bls_request, pack_answer, request_message, unpack_answer
from naiad.backends.python.spec import (
    MEMORY_LIMIT_PARAMETER,
    TIMEOUT_PARAMETER,
    ModelSpec,
    ProcessOptions,
    spin_seconds,
)
from naiad.backends.python.zygote import ModelProcess, describe_status
from naiad.backends.runtime import Runtime
from naiad.core.errors import ErrorCode, ErrorResponse, InferenceServerError, InternalError
from naiad.core.request import InferRequest, InferResponse, OutputMemory, Tensor
from naiad.ipc.tensors import INLINE_MAX

log = logging.getLogger(__name__)

_CLOSE_TIMEOUT = 30.0
#: A model process that ends this many times within CRASH_WINDOW_S seconds is not restarted again.
MAX_CRASHES = 5
CRASH_WINDOW_S = 60.0
#: Restart delays: the first restart waits BACKOFF_FIRST_S, each further one twice the last, at most
#: BACKOFF_MAX_S (a model that crashes on every request must not spin the CPU restarting).
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0
#: How often the watcher checks memory and the execution deadline of a model that has limits.
_POLL_S = 0.05
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _remove_orphans() -> None:
    """Delete the region files of processes that are gone (servers or children killed mid-execution)."""
    for path in shm.remove_orphans():
        log.info("removed %s: the process that created it is gone", path)


#: When this server starts its first model process: the files earlier servers left.
_remove_orphans_once = functools.cache(_remove_orphans)


#: Why a model is not ready when its process ended before its ``is_ready()`` answered (Triton's words).
_GONE_WHILE_ASKED = "Stub process is not healthy while waiting for user-defined is_ready() response"

#: Results go to this callback (on the loop).
_Done = Callable[[list[ExecuteResult]], None]
#: A decoupled model's execution sent from the loop: its key, its requests, its callback, its memory.
_Ahead = tuple[int, Sequence[InferRequest], _Done, "_Memory"]
#: A model process's output regions: at most this many are kept while the engine's views of them live
#: (see ``_Child.output``); past it an execution's outputs are copied out of a region kept for copying.
OUTPUT_REGIONS = 32


class _Memory:
    """The shared memory of one execution: the input region made for it, if any (unlinked once the
    model process answered), the output region it was given (``_Child.output``), and the blocks
    reserved for its outputs where their responses go (released when it ends, see ``_reserve``)."""

    __slots__ = ("fresh", "out", "reserved")

    def __init__(
        self, fresh: shm.Region | None, out: int, reserved: list[tuple[OutputMemory, list[int]]] | None
    ) -> None:
        self.fresh = fresh
        self.out = out
        self.reserved = reserved


class _Child:
    """One model process and the shared memory it was handed; replaced whole by a restart."""

    __slots__ = (
        "ahead",
        "arenas",
        "calls",
        "cause",
        "copying",
        "executing",
        "gone",
        "inbox",
        "inputs",
        "lost",
        "made",
        "open",
        "outputs",
        "process",
        "reader",
        "spare",
    )

    def __init__(self, process: ModelProcess) -> None:
        self.process = process
        #: A decoupled model's: what its reader thread hands the execution waiting for it (``None``
        #: once the process ended), how many executions it was sent and has not answered, the
        #: requests whose final flag has not come (by execution key, then index), and the reader.
        self.inbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self.executing = 0
        self.open: dict[int, dict[int, InferRequest]] = {}
        self.reader: threading.Thread | None = None
        #: A decoupled model's executions the loop sent ahead (``start_on_loop``) whose results have
        #: not come, in the order sent: the process answers them in that order.
        self.ahead: collections.deque[_Ahead] = collections.deque()
        #: Once the engine saw it end (before its watcher restarts it): what executions sent to it
        #: from then on fail with at once, the message the watcher will give (``_restarting``), not
        #: that of the executions it was running, which they did not crash.
        self.lost = ""
        #: The loop saw its socket close and waits for how it ended: executions wait meanwhile.
        self.gone = False
        #: Its streamed BLS calls still running, by the call's number: the request and its streaming.
        self.calls: dict[int, tuple[InferRequest, Future[None]]] = {}
        #: Input regions by slot: the engine may send up to PIPELINE executions ahead, each with a
        #: slot of its own, so that one's tensors are never overwritten by the next.
        self.inputs: dict[int, shm.Region] = {}
        #: Output regions by number (the model process makes each when an execution first needs it),
        #: those no execution in flight was given, and those whose outputs are copied out (``output``).
        self.outputs: dict[int, shm.Region] = {}
        self.spare: list[int] = []
        self.copying: set[int] = set()
        self.made = 0
        #: The shared arenas it was told of (``SharedArenas``), by key.
        self.arenas: set[int] = set()
        #: Why the engine killed it ("" unless it did): the memory limit or the execution timeout.
        self.cause = ""

    def output(self) -> int:
        """The output region for the next execution (the caller holds the instance's lock).

        The engine reads a model process's outputs where they lie, without copying them out (see
        ``_result``): a region is given to the next execution only once no array of the engine's
        reads it any more (:meth:`shm.Region.leased`), and a new one is numbered when none is free.
        Past :data:`OUTPUT_REGIONS` (views kept long, as a client slow to read its response keeps
        them) new regions are made for copying: their outputs are copied out, as the model process
        may overwrite them with the next execution's, so they are free as soon as read.
        """
        spare = self.spare
        outputs = self.outputs
        for index, out in enumerate(spare):
            region = outputs.get(out)
            if region is None or out in self.copying or not region.leased():
                del spare[index]
                return out
        out = self.made
        self.made += 1
        if out - len(self.copying) >= OUTPUT_REGIONS:
            self.copying.add(out)
        return out


#: An execution sent from the loop: to whom, its key, its slot, its requests, its callback, its memory.
_Sent = tuple[_Child, int, int, Sequence[InferRequest], _Done, _Memory]
#: Executions the loop sends a model process ahead of their turn: it runs them one at a time, in order,
#: but finds the next one waiting (no wake-up) and answers several with one write under load.  16, not
#: 8: at 16 connections none then waits for results to come back before it is sent, which cut the CPU
#: per HTTP request by about a fifth in side-by-side runs (benchmarks/isolation).  Each slot keeps
#: input and output regions as large as the largest execution it carried (pages touched only).
PIPELINE = 16


class ProcessModelInstance:
    """A :class:`~naiad.backends.base.ModelInstance` whose model runs in a model process."""

    def __init__(
        self,
        spec: ModelSpec,
        options: ProcessOptions,
        launcher: Launcher,
        runtime: Runtime,
        health: InstanceHealth | None,
        metrics: CustomMetrics | None = None,
    ) -> None:
        """Start the model process and load the model there; raise its load error, if any.  Its
        BLS calls go to the runtime's BLS server, its custom metrics are exported through
        ``metrics`` while the instance lives."""
        _remove_orphans_once()
        self._spec = spec
        #: Outputs of a size the config fixes, reserved where responses go (``_reserve``); none for a
        #: decoupled model, whose responses come while later executions run.
        self._output_bytes = tuple(
            (name, nbytes)
            for name, nbytes in (() if spec.decoupled else spec.output_bytes)
            # (smaller ones travel inside the answer)
            if nbytes * max(1, spec.max_batch_size) > INLINE_MAX
        )
        #: Outputs the model returned as its inputs' memory last time (``_learn_aliases``), and those
        #: of ``_output_bytes`` that are not: the ones reserved.
        self._aliased: set[str] = set()
        self._reservable = self._output_bytes
        self._options = options
        self._launcher = launcher
        self._runtime = runtime
        self._health = health if health is not None else InstanceHealth()
        self._model_name = spec.model_name
        self._model_version = spec.model_version
        self._instance_name = spec.instance_name
        self._caller = bls.Caller(spec.model_name, int(spec.model_version), self)
        self._serial = itertools.count()
        #: The executions under way, by key: the outer one, and nested ones (see ``execute``).
        self._running: dict[int, Sequence[InferRequest]] = {}
        self._lock = threading.Lock()
        #: Why no model process serves now ("" while one does): what requests fail with meanwhile.
        self._unhealthy = ""
        self._closing = False
        #: When the outer execution under way must have finished (monotonic seconds; 0: none).
        self._deadline = 0.0
        self._crashes: collections.deque[float] = collections.deque()
        self._decoupled = spec.decoupled
        self._loop_driven = not mentions_requests(spec.model_file.parent)
        #: Sends to a model process come from its execution, from a decoupled model's reader thread
        #: and from the threads that relay streamed BLS answers (see ``_call``).
        self._send_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The executions the loop sent, in order, and those waiting to be sent after them.
        self._sent: collections.deque[_Sent] = collections.deque()
        self._backlog: collections.deque[tuple[Sequence[InferRequest], _Done]] = collections.deque()
        self._free_slots = list(range(PIPELINE))
        self._flushing = False
        #: Whether the loop watches for the results of a lone execution (see ``spec.SPIN_VARIABLE``),
        #: and when the lone execution in flight was sent (0: none is, or several are).
        self._results_watch = Watch(spin_seconds())
        self._lone_since = 0.0
        #: A decoupled model's executions sent from the loop whose results the loop has not had yet.
        self._ahead = 0
        #: The model process whose socket the loop watches.
        self._reading: _Child | None = None
        self._child = self._started(launcher.start(spec, options))
        self._wake_r, self._wake_w = os.pipe()
        self._watcher = threading.Thread(
            target=self._watch, name=f"naiad-watch-{spec.instance_name}", daemon=True
        )
        self._watcher.start()
        self._metrics = metrics
        if metrics is not None:
            metrics.attach(id(self), lambda: self._child.process.metrics, self._ask_metrics)

    def _ask_metrics(self) -> Future[Any]:
        """Have the model process send its custom metrics if they changed (done once it did)."""
        return self._child.process.ask(("metrics",))

    def resident_bytes(self) -> int:
        """Resident memory of its model process now: what this instance holds (model and interpreter),
        exactly, whichever process started it (see :mod:`naiad.repository.footprint`)."""
        return _resident_bytes(self._child.process.pid)

    @property
    def loop_driven(self) -> bool:
        """Whether the scheduler may drive this instance from the event loop (``start_on_loop``):
        a model that issues no BLS requests needs no thread of the engine waiting on its executions
        (a decoupled model's responses come through its reader thread), so the loop can send them
        ahead, without a thread hand-off, and take their results when they come."""
        return self._loop_driven

    @property
    def load(self) -> int:
        """Executions the loop gave this instance and has not had back (sent, or waiting to be), or
        -1 while no model process serves it (it restarts, or failed to): the scheduler gives the next
        one to a serving instance with the fewest.  (One look per instance and request.)"""
        if self._unhealthy:
            return -1
        return (self._ahead if self._decoupled else len(self._sent)) + len(self._backlog)

    @property
    def waiting(self) -> int:
        """Requests the loop gave this instance that its model process has not started: those in
        the backlog, and those sent behind the execution it runs (it runs them one at a time, in
        order); still pending, as Triton counts them (``nv_inference_pending_request_count``)."""
        backlog = sum(len(requests) for requests, _ in self._backlog)
        if self._decoupled:
            with self._lock:
                ahead = [sent[1] for sent in self._child.ahead]
        else:
            ahead = [sent[3] for sent in self._sent]
        return backlog + sum(len(requests) for requests in ahead[1:])

    @property
    def checks_readiness(self) -> bool:
        """Always: a model process that is not serving (restarting, or given up) makes its model not
        ready, as Triton's stub that is not alive does, and a model's ``is_ready()`` is asked."""
        return True

    def ask_readiness(self) -> Future[str]:
        """ "" if the model process serves and its model's ``is_ready()`` (if any) says it is ready,
        else why not, in Triton's words; asked through the process's side channel, where a thread of
        its own answers while an execution runs."""
        with self._lock:
            child, unhealthy = self._child, self._unhealthy
        answer: Future[str] = Future()
        if unhealthy or not child.process.checks_readiness:
            answer.set_result(f"Stub process '{self._instance_name}' is not healthy." if unhealthy else "")
            return answer
        asked = child.process.ask(("ready",))

        def answered(done: Future[Any]) -> None:
            reason = done.result()
            answer.set_result(_GONE_WHILE_ASKED if reason is None else str(reason))

        asked.add_done_callback(answered)
        return answer

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        """Run ``requests`` in the model process, on the calling thread.

        Also called while an execution of this instance waits for a BLS call whose answer needs
        this very instance (see :mod:`naiad.backends.python.bls`): that nested execution gets input
        memory of its own, since the waiting one still reads its inputs.
        """
        with self._lock:
            child, unhealthy = self._child, self._unhealthy
        if unhealthy:
            return [InternalError(unhealthy) for _ in requests]
        nested = bool(self._running)
        # a decoupled model's threads may read a request's inputs after ``execute`` returned, while
        # later executions run: each execution gets input memory of its own (as a nested one does)
        slot = -1 if nested or self._decoupled else 0
        key, message, memory = self._prepare(child, requests, slot, nested)
        try:
            if self._decoupled:
                with self._lock:
                    child.open[key] = dict(enumerate(requests))
                    child.executing += 1
            self._send(child, message)
            if self._decoupled:
                self._watch_cancel(child, key, requests)
            with bls.executing(self._caller, requests):
                reply = self._serve_child(child)
        except (EOFError, OSError):
            stopped = self._stopped(child, "while executing")
            return [InternalError(stopped) for _ in requests]
        finally:
            self._finish(key, nested, memory)
        results = self._collect(child, memory, requests, reply)
        if self._decoupled:
            self._close_failed(child, key, results)
        return results

    def _close_failed(self, child: _Child, key: int, results: Sequence[ExecuteResult]) -> None:
        """A decoupled request that failed gets no responses: its stream ends with the error, so it
        leaves the open streams of execution ``key``; so does one released for rescheduling, whose
        stream goes on in the execution that runs it next."""
        with self._lock:
            streams = child.open.get(key, {})
            for index, result in enumerate(results):
                if not isinstance(result, InferResponse):
                    streams.pop(index, None)
            if not streams:
                child.open.pop(key, None)

    def _send(self, child: _Child, message: Any) -> None:
        with self._send_lock:
            child.process.conn.send(message)

    def _watch_cancel(self, child: _Child, key: int, requests: Sequence[InferRequest]) -> None:
        """Have the model process told when a request of execution ``key`` is cancelled (after the
        execution's message, so it knows the request; one cancelled before that is told now)."""
        for index, request in enumerate(requests):
            request.on_cancel = functools.partial(self._cancel, child, key, index)
            if request.cancelled:
                self._cancel(child, key, index)

    def _cancel(self, child: _Child, key: int, index: int) -> None:
        """Tell ``child`` that request ``index`` of execution ``key`` was cancelled, while its stream
        is open (from the thread that cancelled it)."""
        with self._lock:
            if index not in child.open.get(key, {}):
                return
        try:
            self._send(child, ("cancel", key, index))
        except OSError:  # it ended: its reader fails the stream
            pass

    def _started(self, process: ModelProcess) -> _Child:
        """A decoupled model's process gets a reader thread: its threads keep sending responses (and
        asking whether requests were cancelled) after ``execute`` returned, while the instance runs
        the next executions, as Triton's stub does."""
        child = _Child(process)
        if self._decoupled:
            child.reader = threading.Thread(
                target=self._read, args=(child,), name=f"naiad-read-{self._instance_name}", daemon=True
            )
            child.reader.start()
        return child

    def _read(self, child: _Child) -> None:
        """A decoupled model's socket: deliver responses, and hand the rest (results, BLS calls) to
        the execution that waits for them.  Once the process ended, the streams no execution answers
        for end with the reason."""
        conn = child.process.conn
        try:
            while True:
                message = conn.receive()
                kind = message[0]
                if kind == "respond":
                    _, key, index, packed, final = message
                    with self._lock:
                        streams = child.open.get(key, {})
                        request = streams.pop(index, None) if final else streams.get(index)
                        if final and not streams:
                            child.open.pop(key, None)
                    if request is not None and request.responses is not None:
                        request.responses(unpack_answer(packed, self._model_name, self._model_version), final)
                elif kind == "bls_cancel":
                    self._cancel_call(child, message[1])
                elif kind in ("bls", "control"):
                    with self._lock:
                        waited = child.executing > 0
                    if waited:
                        child.inbox.put(message)
                    else:  # from a model thread between executions: nobody waits, answer it aside
                        threading.Thread(target=self._forward, args=(child, message), daemon=True).start()
                else:
                    if kind == "results":
                        with self._lock:
                            sent = child.ahead.popleft() if child.ahead else None
                            if sent is None:
                                child.executing -= 1
                        if sent is not None:  # sent ahead from the loop (``_send_ahead``)
                            self._answer_ahead(child, sent, message)
                            continue
                    child.inbox.put(message)
        except (EOFError, OSError):
            child.inbox.put(None)
        self._ended(child)

    def _ended(self, child: _Child) -> None:
        """A decoupled model's process ended (on its reader thread): the executions sent ahead that
        it did not answer fail with the reason, as an execution from a thread does, and so do the
        streams no execution answers for."""
        if self._closing:
            executing = streaming = later = self._not_healthy("the model was unloaded")
        else:
            # (learning how it ended also lets an execution that got its results leave ``_running``)
            executing = self._stopped(child, "while executing")
            streaming = self._stopped(child, "while streaming")
            later = self._restarting(child)
        with self._lock:
            child.lost = later
            unanswered = list(child.ahead)
            child.ahead.clear()
            for key, *_ in unanswered:
                child.open.pop(key, None)
        for key, _, _, memory in unanswered:
            self._finish(key, False, memory)
        with self._lock:
            orphaned = [
                request
                for key, streams in child.open.items()
                if key not in self._running
                for request in streams.values()
            ]
            child.open.clear()
        error = InternalError(streaming)
        for request in orphaned:
            if request.responses is not None:
                request.responses(error, True)
        for _, requests, done, _ in unanswered:
            self._call_on_loop(done, [InternalError(executing) for _ in requests])

    def _forward(self, child: _Child, message: tuple[Any, ...]) -> None:
        """Make a model's BLS call and send its answers back (on a thread of its own)."""
        try:
            self._call(child, message)
        except OSError:  # the process ended: its reader fails what it owes
            pass

    def _call(self, child: _Child, message: tuple[Any, ...]) -> None:
        """Make a BLS call the model process forwarded: ``("bls", number, request, decoupled)``, or
        a model loading API call, ``("control", call)``, answered ``("controlled", ok, value)``.

        A call that is not streamed is answered with ``("answer", answer)`` once made (the model
        waits for it).  A streamed call's answers go as ``("stream", number, answer, final)``, each
        as soon as the callee sent it, from a relay thread while the model process goes on; then
        ``("streaming", number)`` tells the model to stop waiting for the call itself (after every
        answer when the call ran inline, since the model's waiting thread runs it).  The model
        process may send ``("bls_cancel", number)`` meanwhile: the callee's request is marked
        cancelled, as Triton's iterator ``cancel()`` does (see :func:`bls.cancel`).
        """
        if message[0] == "control":  # the model loading API: ``("control", call)``
            try:
                value = bls.model_control(self._runtime.bls, message[1])
                reply: tuple[Any, ...] = ("controlled", True, value)
            except pb_utils.TritonModelException as exc:
                reply = ("controlled", False, str(exc))
            self._send(child, reply)
            return
        _, number, body, decoupled = message
        request = bls_request(body)
        items, streaming = bls.forwarded(self._runtime.bls, request, decoupled)
        if not decoupled:
            self._send(child, ("answer", pack_answer(items.get()[0])))
            return
        if streaming is None:  # every answer is there already
            final = False
            while not final:
                answer, final = items.get()
                self._send(child, ("stream", number, pack_answer(answer), final))
        else:
            child.calls[number] = request, streaming
            threading.Thread(
                target=self._relay, args=(child, number, items), name="naiad-bls-relay", daemon=True
            ).start()
        self._send(child, ("streaming", number))

    def _relay(self, child: _Child, number: int, items: queue.SimpleQueue[bls.StreamItem]) -> None:
        """Send a streamed BLS call's answers to the model process as they come."""
        try:
            final = False
            while not final:
                answer, final = items.get()
                self._send(child, ("stream", number, pack_answer(answer), final))
        except OSError:  # the process ended: nobody reads the answers any more
            _drop_calls(child)
        finally:
            child.calls.pop(number, None)

    @staticmethod
    def _cancel_call(child: _Child, number: int) -> None:
        """The model cancelled a streamed BLS call (one that ended meanwhile has nothing to cancel)."""
        call = child.calls.get(number)
        if call is not None:
            bls.cancel(call[0])

    def _prepare(
        self, child: _Child, requests: Sequence[InferRequest], slot: int, nested: bool = False
    ) -> tuple[int, tuple[Any, ...], _Memory]:
        """Place the inputs in ``slot``'s region (a region of its own for slot -1: a nested
        execution's, or a decoupled model's), or where they lie in a shared arena, and register the
        execution: its key, its message, and its memory (the input region made for it, to unlink once
        the model process answered, and the output region it is given)."""
        if len(requests) == 1:  # most executions: one request, no flattening
            tensors = requests[0].inputs
        else:
            tensors = [t for request in requests for t in request.inputs]
        fresh: shm.Region | None = None
        told = None
        spans = self._runtime.arenas.spans
        lent: list[shm.Shared] = []
        placements = shm.in_message(tensors, spans, lent)
        if lent and placements is not None:
            told = self._tell_arenas(child, lent)
        if placements is None:
            shared = shm.locate(spans, tensors)
            told = self._tell_arenas(child, shared) if shared is not None else None
            needed = shm.layout_size(tensors, shared)
            region = child.inputs.get(slot)
            if needed and (slot < 0 or region is None or needed > region.size):
                fresh = region = shm.Region.create(needed)
                if slot >= 0:
                    child.inputs[slot] = fresh
            placements = shm.place(region, tensors, shared)
        reserved: list[tuple[OutputMemory, list[int]]] | None = None
        destinations: list[dict[str, tuple[int, int, int]] | None] | None = None
        if self._reservable and not nested:
            destinations = [None] * len(requests)
            reserved, told = self._reserve(child, requests, destinations, told)
        if len(requests) == 1:
            messages = [request_message(requests[0], placements, destinations[0] if destinations else None)]
        else:
            messages = []
            start = 0
            for index, request in enumerate(requests):
                end = start + len(request.inputs)
                chosen = destinations[index] if destinations else None
                messages.append(request_message(request, placements[start:end], chosen))
                start = end
        key = next(self._serial)
        timeout = self._options.execution_timeout_s
        with self._lock:  # (a decoupled model's reader thread finishes executions sent ahead)
            self._running[key] = requests
            if timeout and not nested and not self._deadline:
                self._deadline = time.monotonic() + timeout
            out = child.output()
        path, size = (fresh.path, fresh.size) if fresh is not None else (None, None)
        # whether it is the server's only request: the model process then watches longer after a
        # streak of them (a client calling one request at a time, see ``messages.Watch``)
        lone = not nested and bool(self._results_watch.limit) and self._runtime.in_flight() <= 1
        message = ("execute", key, nested, slot, out, path, size, told, lone, messages)
        return key, message, _Memory(fresh, out, reserved)

    def _reserve(
        self,
        child: _Child,
        requests: Sequence[InferRequest],
        destinations: list[dict[str, tuple[int, int, int]] | None],
        told: tuple[Any, ...] | None,
    ) -> tuple[list[tuple[OutputMemory, list[int]]] | None, tuple[Any, ...] | None]:
        """Reserve, where each request's response goes (a frontend worker's response arena, lent to
        model processes; in its ring for long-lived blocks, since a reservation lives from this send
        to the worker's release), a block for each output it asks for whose size the config fixes; the model
        process writes a matching output there itself, so the engine's loop copies nothing (it would
        copy the output from this process's region otherwise, for each request, whatever its size).
        Fills ``destinations`` (per request: output name -> ``(arena key, offset, bytes)``); returns
        what was reserved, to release when the execution ends, and what ``child`` must now learn of
        the lent arenas (``told``, with the response arenas it does not know yet)."""
        arenas = self._runtime.arenas
        if not arenas.lending:
            return None, told
        reserved: list[tuple[OutputMemory, list[int]]] = []
        keys: list[shm.Shared] = []
        batched = self._spec.max_batch_size > 0
        for index, request in enumerate(requests):
            memory = request.output_memory
            if memory is None or not memory.key or memory.key not in arenas:
                continue
            wanted = None if request.outputs is None else {output.name for output in request.outputs}
            batch = request.batch_size if batched else 1
            chosen: dict[str, tuple[int, int, int]] = {}
            offsets: list[int] = []
            for name, per_item in self._reservable:
                if wanted is not None and name not in wanted:
                    continue
                nbytes = per_item * batch
                offset = memory.reserve(nbytes)
                if offset is not None:
                    chosen[name] = (memory.key, offset, nbytes)
                    offsets.append(offset)
            if offsets:
                destinations[index] = chosen
                reserved.append((memory, offsets))
                keys.append((memory.key, 0))
        if not reserved:
            return None, told
        more = self._tell_arenas(child, keys)
        if more is not None:
            told = more if told is None else (told[0] + more[0], told[1] + more[1])
        return reserved, told

    def _tell_arenas(self, child: _Child, shared: list[shm.Shared]) -> tuple[Any, ...] | None:
        """What ``child`` must learn of the shared arenas before it reads these inputs: ``(arenas to
        map as (key, path, size), keys to forget)``, or ``None`` when it knows them all.  An arena it
        was told of is forgotten once its worker is gone, when it is told of the next one."""
        arenas = self._runtime.arenas
        known = child.arenas
        for where in shared:  # (without the lock first: it knows them all, most of the time)
            if where is not None and where[0] not in known:
                break
        else:
            return None
        with self._lock:
            new = {where[0] for where in shared if where is not None and where[0] not in child.arenas}
            if not new:
                return None
            gone = [key for key in child.arenas if key not in arenas]
            child.arenas.difference_update(gone)
            child.arenas.update(new)
        return ([(key, *arenas.describe(key)) for key in new], gone)

    def _finish(self, key: int, nested: bool, memory: _Memory) -> None:
        if memory.reserved is not None:  # the model process writes none of them any more
            for output_memory, offsets in memory.reserved:
                output_memory.release(offsets)
        with self._lock:
            del self._running[key]
            if not nested:
                timeout = self._options.execution_timeout_s
                # the next execution sent ahead starts now
                self._deadline = time.monotonic() + timeout if timeout and self._running else 0.0
        if memory.fresh is not None:  # the model process has mapped it by now, or never will
            memory.fresh.unlink()

    def _collect(
        self, child: _Child, memory: _Memory, requests: Sequence[InferRequest], reply: tuple[Any, ...]
    ) -> list[ExecuteResult]:
        """The results of an execution, its outputs read where the model process placed them; its
        output region goes back to ``child``'s spares (given again once nothing reads it)."""
        _, path, size, results = reply
        out = memory.out
        region = child.outputs.get(out)
        if path is not None:  # the model process made it (or a larger one) for this execution
            region = shm.Region.attach(path, size)
            region.unlink()
            child.outputs[out] = region
        copy = out in child.copying
        try:
            if len(requests) == 1:  # most executions
                return [self._result(region, requests[0], results[0], copy)]
            return [
                self._result(region, request, result, copy)
                for request, result in zip(requests, results, strict=True)
            ]
        finally:
            with self._lock:
                child.spare.append(out)

    # ---- driven from the event loop -------------------------------------------------------------

    def start_on_loop(self, requests: Sequence[InferRequest], done: _Done) -> None:
        """Send ``requests`` to the model process (at most PIPELINE executions ahead; later ones wait
        here) and call ``done`` with their results on the loop; only for a ``loop_driven`` instance,
        on the loop."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if self._backlog or (self._ahead if self._decoupled else len(self._sent)) >= PIPELINE:
            self._backlog.append((requests, done))
        elif self._decoupled:
            self._send_ahead(requests, done)
        else:
            self._send_on_loop(requests, done)

    def _send_ahead(self, requests: Sequence[InferRequest], done: _Done) -> None:
        """Send a decoupled model's execution without waiting for those before it.

        Its process runs executions one at a time, in order, and its reader thread (``_read``)
        delivers the responses as for an execution from a thread; the results, which then only say
        which requests failed, come back to ``done`` through the loop (``_answered``).  So a burst of
        requests reaches the model with one wake-up of each process rather than a round trip each.
        """
        with self._lock:
            child, unhealthy = self._child, self._unhealthy
        if unhealthy:
            done([InternalError(unhealthy) for _ in requests])
            return
        key, message, memory = self._prepare(child, requests, -1)
        with self._lock:
            lost = child.lost
            if not lost:
                child.open[key] = dict(enumerate(requests))
                child.ahead.append((key, requests, done, memory))
        if lost:  # its reader saw the end before the watcher marked the instance unhealthy
            self._finish(key, False, memory)
            done([InternalError(lost) for _ in requests])
            return
        self._ahead += 1
        try:
            if len(child.ahead) == 1:  # the process is idle: at once
                self._send(child, message)
            else:  # it is busy: with whatever else this loop iteration sends it
                with self._send_lock:
                    child.process.conn.queue(message)
                self._flush_soon(child, self._flush_ahead)
        except OSError:  # it ended: its reader fails what was sent
            pass
        self._watch_cancel(child, key, requests)

    def _flush_ahead(self, child: _Child) -> None:
        self._flushing = False
        try:
            with self._send_lock:
                child.process.conn.flush()
        except OSError:  # it ended: its reader fails what was sent
            pass

    def _answer_ahead(self, child: _Child, sent: _Ahead, reply: tuple[Any, ...]) -> None:
        """The results of an execution sent ahead came (on the reader thread): a request that failed
        gets no responses (its stream ends with the error); hand them to the loop."""
        key, requests, done, memory = sent
        self._finish(key, False, memory)
        try:
            results = self._collect(child, memory, requests, reply)
        except Exception as exc:  # e.g. its output region is gone: fail these requests, not the reader
            results = [InternalError(f"{type(exc).__name__}: {exc}") for _ in requests]
        self._close_failed(child, key, results)
        self._call_on_loop(done, results)

    def _call_on_loop(self, done: _Done, results: list[ExecuteResult]) -> None:
        loop = self._loop
        assert loop is not None
        try:
            loop.call_soon_threadsafe(self._answered, done, results)
        except RuntimeError:  # the loop closed: nobody waits for them any more
            pass

    def _answered(self, done: _Done, results: list[ExecuteResult]) -> None:
        """On the loop: deliver an execution's results and send what waits (``_send_ahead``)."""
        self._ahead -= 1
        try:
            done(results)
        except Exception:
            log.exception("delivering the results of model '%s' failed", self._model_name)
        self._refill()

    def _send_on_loop(self, requests: Sequence[InferRequest], done: _Done) -> None:
        with self._lock:
            child, unhealthy = self._child, self._unhealthy or self._child.lost
        if unhealthy or child.gone or (self._sent and self._sent[0][0] is not child):
            if unhealthy:
                done([InternalError(unhealthy) for _ in requests])
            else:  # the executions sent to the previous process fail first, or the ended one's
                # end is being learned (``_lost``): it is then not sent to a process that is gone
                self._backlog.appendleft((requests, done))
            return
        slot = self._free_slots.pop()
        key, message, memory = self._prepare(child, requests, slot)
        self._sent.append((child, key, slot, requests, done, memory))
        child.process.conn.queue(message)
        # with whatever else this loop iteration sends it, in one write, even to an idle process:
        # under load an iteration starts several executions, and the process then wakes once for
        # all of them (each wake-up costs both processes more than the execution's own work); alone,
        # the execution waits only for the rest of an iteration that has nothing else to do
        self._flush_soon(child)
        if self._reading is not child:
            loop = self._loop
            assert loop is not None
            if self._reading is not None:
                _unwatch(loop, self._reading.process.conn.fileno())
            loop.add_reader(child.process.conn.fileno(), self._readable, child)
            self._reading = child

    def _flush_soon(self, child: _Child, flush: Callable[[_Child], None] | None = None) -> None:
        """Write what is queued for ``child`` at the end of this loop iteration, once, with ``flush``
        (``_flush``; a decoupled model's: ``_flush_ahead``)."""
        if not self._flushing:
            self._flushing = True
            assert self._loop is not None
            self._loop.call_soon(flush or self._flush, child)

    def _flush(self, child: _Child) -> None:
        """Send what this loop iteration queued for ``child``, in one write.  A lone execution's
        results are then watched for a moment on the loop (they come in tens of microseconds for a
        light model): taken at once, they spare the loop a wake-up.  Only while nothing else is in
        flight, here or anywhere in the server, and the last lone execution's results came within the
        watch: the watch holds the loop, which under load has other requests to serve."""
        self._flushing = False
        conn = child.process.conn
        try:
            sent = conn.flush_ready()
        except OSError:  # it ended: its reader sees EOF and fails what was sent
            return
        if not sent:  # a large frame to a busy process: the rest as it reads, the loop serving meanwhile
            assert self._loop is not None
            self._loop.add_writer(conn.fileno(), self._drain, child)
            return
        watch = self._results_watch
        if not watch.limit:
            return
        if len(self._sent) != 1:
            self._lone_since = 0.0
            return
        self._lone_since = time.perf_counter()
        if watch.worth_it() and self._runtime.in_flight() <= 1 and conn.arrives_within(watch.limit):
            self._readable(child)

    def _drain(self, child: _Child) -> None:
        """The socket to ``child`` takes more: send what ``_flush`` left (and what was queued since)."""
        conn = child.process.conn
        try:
            sent = conn.flush_ready()
        except OSError:  # it ended: its reader sees EOF and fails what was sent
            sent = True
        if sent:
            assert self._loop is not None
            self._loop.remove_writer(conn.fileno())

    def _readable(self, child: _Child) -> None:
        """The model process sent something (or ended): answer questions, deliver results."""
        loop = self._loop
        assert loop is not None
        conn = child.process.conn
        try:
            messages = conn.receive_ready()
        except (EOFError, OSError):
            _unwatch(loop, conn.fileno())
            self._reading = None
            self._lost(child)
            return
        for message in messages:
            if message[0] == "is_cancelled":  # (after whatever is still unsent: the process reads in order)
                conn.queue(self._running[message[1]][message[2]].cancelled)
                self._flush_soon(child)
                continue
            _, key, slot, requests, done, memory = self._sent.popleft()
            if self._lone_since:
                self._results_watch.waited(time.perf_counter() - self._lone_since)
                self._lone_since = 0.0
            self._finish(key, False, memory)
            self._free_slots.append(slot)
            try:
                done(self._collect(child, memory, requests, message))
            except Exception:
                log.exception("delivering the results of model '%s' failed", self._model_name)
        self._refill()

    def _lost(self, child: _Child) -> None:
        """``child`` ended: fail what was sent to it once the template reported how (never blocks
        the loop), then go on with the backlog (on the next process, or failing fast)."""
        loop = self._loop
        assert loop is not None
        lost = [sent for sent in self._sent if sent[0] is child]
        child.gone = True
        sentinel = child.process.sentinel

        def ended() -> None:
            loop.remove_reader(sentinel)
            message = self._stopped(child, "while executing")
            child.lost = self._restarting(child)  # for the executions that come from now on
            for sent in lost:
                self._sent.remove(sent)
                _, key, slot, requests, done, memory = sent
                self._finish(key, False, memory)
                self._free_slots.append(slot)
                done([InternalError(message) for _ in requests])
            self._refill()

        loop.add_reader(sentinel, ended)

    def _refill(self) -> None:
        """Send what waits in the backlog while fewer than PIPELINE executions are out (about half
        of a saturated engine's sends to a model process come from here, when results arrive)."""
        backlog = self._backlog
        decoupled = self._decoupled
        send = self._send_ahead if decoupled else self._send_on_loop
        while backlog and (self._ahead if decoupled else len(self._sent)) < PIPELINE:
            requests, done = backlog.popleft()
            before = len(backlog)
            send(requests, done)
            if len(backlog) > before:  # put back: the previous process's executions go first
                return

    def _stop_reading(self) -> None:
        """Take the current socket off the loop before it is closed (from the closing thread); what
        the loop left unsent is sent by the closing thread's ``close`` message, before it."""
        loop, reading = self._loop, self._reading
        if loop is None or reading is None or loop.is_closed():
            return
        fd = reading.process.conn.fileno()
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop or not loop.is_running():
            _unwatch(loop, fd)
        else:
            removed = threading.Event()

            def remove() -> None:
                _unwatch(loop, fd)
                removed.set()

            loop.call_soon_threadsafe(remove)
            removed.wait(5.0)
        self._reading = None

    def _stopped(self, child: _Child, when: str) -> str:
        """Triton's message for requests whose model process ended under them, and what happened."""
        code = child.process.wait(5.0)
        return self._not_healthy(f"its model process stopped {when}: {child.cause or describe_status(code)}")

    def _restarting(self, child: _Child) -> str:
        """Triton's message for requests that come after ``child`` ended, until it is restarted:
        the watcher's (``_watch``), and the loop's when it learns of the end first (``_lost``)."""
        code = child.process.wait(5.0)
        return self._not_healthy(
            f"its model process stopped ({child.cause or describe_status(code)}) and is restarting"
        )

    def _not_healthy(self, detail: str) -> str:
        return f"Stub process '{self._instance_name}' is not healthy. Model '{self._model_name}': {detail}"

    def run_inline(self, requests: list[InferRequest]) -> list[ExecuteResult]:
        """A nested execution for a BLS call this instance waits for (``bls`` decides when)."""
        return self.execute(requests)

    async def run_inline_async(self, requests: list[InferRequest]) -> list[ExecuteResult]:
        return await asyncio.to_thread(self.execute, requests)

    def _serve_child(self, child: _Child) -> tuple[Any, ...]:
        """Answer what the child asks while it executes; its ``results`` message.

        The child asks whether a request was cancelled, sends a decoupled model's responses
        (``respond``), and forwards the model's BLS calls, which are made here, on this thread,
        while the child waits for their answers.  Both name the execution (a nested one may run).
        """
        conn = child.process.conn
        while True:
            if self._decoupled:  # its reader thread reads the socket
                handed = child.inbox.get()
                if handed is None:
                    raise EOFError
                message = handed
            else:
                message = conn.receive()
            kind = message[0]
            if kind == "is_cancelled":
                self._send(child, self._running[message[1]][message[2]].cancelled)
            elif kind == "respond":
                _, key, index, packed, final = message
                sink = self._running[key][index].responses
                if sink is not None:
                    sink(unpack_answer(packed, self._model_name, self._model_version), final)
            elif kind in ("bls", "control"):
                self._call(child, message)
            elif kind == "bls_cancel":
                self._cancel_call(child, message[1])
            else:
                return tuple(message)

    def _result(
        self, region: shm.Region | None, request: InferRequest, result: tuple[Any, ...], copy: bool
    ) -> ExecuteResult:
        """One request's result; its outputs are read-only views of where they lie (``copy``: copies
        out of a region kept for copying), as a model in the engine hands views of its outputs on."""
        kind = result[0]
        if kind != "ok":
            if kind == "rescheduled":  # released for rescheduling (see ``Rescheduled``)
                return Rescheduled()
            # ``("error", code, message[, given as the response])``
            error = ErrorResponse if len(result) > 3 and result[3] else InferenceServerError
            return error(result[2], ErrorCode(result[1]))
        _, parameters, placements = result
        if self._output_bytes and request.output_memory is not None:
            self._learn_aliases(placements, request.output_memory.key)
        outputs: list[Tensor] = []
        try:
            for place in placements:
                where = place[5]
                if type(where) is bytes:  # a small output, in the message: a view of its bytes
                    outputs.append(Tensor(place[0], place[1], np.ndarray(place[2], place[3], where)))
                else:
                    outputs.append(self._output(region, place, copy))
        except InternalError as error:
            return error
        return InferResponse(self._model_name, self._model_version, request.id, outputs, parameters)

    def _learn_aliases(self, placements: list[shm.Placement], reserved_in: int) -> None:
        """Which outputs the model last returned as its inputs' memory (an identity's), which it needs
        no block reserved for (``_reserve``), and which from its own memory, which it does."""
        aliased = self._aliased
        changed = False
        for placement in placements:
            name, where = placement[0], placement[5]
            if type(where) is not int:  # (in its region, or in the message)
                if name in aliased:
                    aliased.discard(name)
                    changed = True
            elif type(where) is int and where != reserved_in and name not in aliased:
                aliased.add(name)
                changed = True
        if changed:
            self._reservable = tuple(item for item in self._output_bytes if item[0] not in aliased)

    def _output(self, region: shm.Region | None, placement: shm.Placement, copy: bool) -> Tensor:
        name, datatype, shape, dtype, offset, where = placement
        if isinstance(where, int):  # an input of its (or a view of one), or written where its response goes
            lent = self._runtime.arenas.tensor(name, datatype, where, offset, shape, dtype)
            if lent is None:
                raise InternalError("the frontend worker that sent the request has ended")
            return lent
        return Tensor(name, datatype, shm.copy(region, placement) if copy else shm.view(region, placement))

    # ---- the watcher: death, memory, timeout, restarts -------------------------------------------

    def _watch(self) -> None:
        """Until the instance closes: wait for the model process to end (killing it past a limit),
        then restart it with backoff, or give up after too many ends in the window."""
        while True:
            child = self._child
            if not self._await_end(child):
                return
            cause = child.cause or describe_status(child.process.returncode)
            log.warning(
                "the model process of model '%s' instance '%s' (pid %d) stopped: %s",
                self._model_name,
                self._instance_name,
                child.process.pid,
                cause,
            )
            self._health.exited(_cause_kind(child))
            _drop_calls(child)
            _remove_orphans()  # a region it made but had not handed over yet
            restarting = self._restarting(child)
            with self._lock:
                self._unhealthy = restarting
            if not self._restart(cause):
                return

    def _await_end(self, child: _Child) -> bool:
        """True once ``child`` ended; False when the instance closes first."""
        limit = self._options.memory_limit_bytes
        timeout = self._options.execution_timeout_s
        interval = _POLL_S if (limit or timeout) else None
        process = child.process
        watched = [process.sentinel, self._wake_r, process.log]
        while True:
            ready = wait(watched, interval)
            if process.log in ready and not process.relay_logs():
                watched.remove(process.log)  # closed: the process is ending
            if self._closing:
                return False
            if process.sentinel in ready:
                process.poll()
                process.relay_last_logs()
                return True
            if limit and not child.cause:
                resident = _resident_bytes(process.pid)
                if resident > limit:
                    child.cause = (
                        f"its resident memory ({resident >> 20} MiB) exceeded the model's memory limit "
                        f"({MEMORY_LIMIT_PARAMETER} {limit >> 20}), so it was killed"
                    )
                    process.kill()
            deadline = self._deadline
            if timeout and deadline and not child.cause and time.monotonic() > deadline:
                child.cause = (
                    f"an execution ran past the model's execution timeout ({TIMEOUT_PARAMETER} "
                    f"{timeout:g}), so it was killed"
                )
                process.kill()

    def _restart(self, cause: str) -> bool:
        """Start a new model process after the backoff delay; False when giving up or closing."""
        while True:
            now = time.monotonic()
            crashes = self._crashes
            crashes.append(now)
            while crashes and crashes[0] < now - CRASH_WINDOW_S:
                crashes.popleft()
            if len(crashes) >= MAX_CRASHES:
                reason = (
                    f"model instance '{self._instance_name}' stopped {len(crashes)} times within "
                    f"{CRASH_WINDOW_S:g} s and is not restarted again (last: {cause}); load the model "
                    "again to retry"
                )
                log.error("model '%s': %s", self._model_name, reason)
                with self._lock:
                    self._unhealthy = self._not_healthy(reason)
                self._health.fail(reason)
                return False
            delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (len(crashes) - 1))
            if wait([self._wake_r], delay) or self._closing:
                return False
            try:
                process = self._launcher.start(self._spec, self._options)
            except InferenceServerError as exc:
                cause = f"restarting failed: {exc.message}"
                log.warning("model '%s' instance '%s': %s", self._model_name, self._instance_name, cause)
                with self._lock:
                    self._unhealthy = self._not_healthy(cause)
                continue
            with self._lock:
                closing = self._closing
                if not closing:
                    old, self._child, self._unhealthy = self._child, self._started(process), ""
            if closing:
                _stop(process)
                return False
            if old.reader is not None:  # it saw the end and failed the streams it owed
                old.reader.join(_CLOSE_TIMEOUT)
            old.process.close()
            log.info(
                "restarted the model process of model '%s' instance '%s'",
                self._model_name,
                self._instance_name,
            )
            return True

    def close(self) -> None:
        """``finalize()`` in the model process, then stop it (killed if it does not exit in time).
        A model process that already stopped is only reaped: closing never starts a new one, and
        closing twice does nothing the second time."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            child, healthy = self._child, not self._unhealthy
        if self._metrics is not None:
            self._metrics.detach(id(self))
        os.write(self._wake_w, b"x")
        self._stop_reading()
        conn = child.process.conn
        if healthy and child.process.poll() is None:
            try:
                if child.reader is not None:
                    self._send(child, ("close",))
                    child.inbox.get(timeout=_CLOSE_TIMEOUT)
                else:
                    self._send(child, ("close",))  # (a relay thread may still be sending)
                    if conn.poll(_CLOSE_TIMEOUT):
                        conn.receive()
            except (EOFError, OSError, queue.Empty):
                pass
        if child.reader is not None:  # the process leaves after ``closed``: its reader sees the end
            child.process.wait(_CLOSE_TIMEOUT)
            child.reader.join(_CLOSE_TIMEOUT)
        # the watcher reads the process's side channel: it must be gone before it closes (a read of
        # a closed descriptor fails, or reads another file that reused its number)
        self._watcher.join(_CLOSE_TIMEOUT)
        _stop(child.process)
        _drop_calls(child)
        os.close(self._wake_r)
        os.close(self._wake_w)


def _unwatch(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """Take a model process's socket off the loop: its results' reader and the writer of a large
    frame's rest (``_drain``), if any."""
    loop.remove_reader(fd)
    loop.remove_writer(fd)


def _stop(process: ModelProcess) -> None:
    """Close the socket (an idle stub leaves on EOF), reap the process, kill it if it lingers."""
    process.conn.close()
    if process.wait(_CLOSE_TIMEOUT) is None:
        log.warning("model process %d did not exit: killing it", process.pid)
        process.kill()
        process.wait(None)
    process.relay_last_logs()  # (``finalize()``'s, after the watcher stopped reading)
    process.close()


def _drop_calls(child: _Child) -> None:
    """Stop the streamed BLS calls of a model process that ended, as a client that goes away does:
    nobody reads their answers any more."""
    for request, streaming in list(child.calls.values()):
        request.cancel()
        streaming.cancel()


def _cause_kind(child: _Child) -> str:
    """The metric label for how a model process ended."""
    if child.cause.startswith("its resident memory"):
        return "memory_limit"
    if child.cause:
        return "execution_timeout"
    code = child.process.returncode
    return "signal" if code is not None and code < 0 else "exit"


def _resident_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0
