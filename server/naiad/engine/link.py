"""The engine's end of one frontend worker: requests in, answers out, through the data plane.

Every request runs as its own coroutine, as the frontend's handler would run it in process, so
queueing, priorities, timeouts and cancellation behave the same; a ``Cancel`` cancels it where it
waits (a request that waits is carried on as a task would carry it, see ``_Steps``).  A
request's input block stays the worker's until the final :class:`Answer` for it, which is always sent
(``done``), whatever happened, so the worker never reuses memory the engine may still read.  A
request the worker traces is sampled here, for every worker at once (:mod:`naiad.workers.tracer`):
the verdict goes back in the final answer.

The per-request path is kept lean, as it bounds the whole server's throughput: no task, no per-request
closures, small outputs inside the answer instead of in the response arena.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import aclosing
from typing import Any

import msgspec

from naiad.core.errors import ErrorCode, ErrorResponse, InferenceServerError
from naiad.core.request import InferRequest, InferResponse
from naiad.core.signature import ModelSignature
from naiad.dataplane import AtOnce, DataPlane, EmptyFinal
from naiad.ipc import tensors
from naiad.ipc.arena import Arena
from naiad.ipc.channel import Channel
from naiad.ipc.messages import (
    NOT_SAMPLED,
    Ack,
    Answer,
    Call,
    Cancel,
    ErrorMsg,
    Infer,
    Release,
    Reply,
    RequestMsg,
    ResponseMsg,
    Serving,
    Stream,
    ToEngine,
    TraceEnd,
)
from naiad.repository.model import Model
from naiad.tracing.trace import completed

log = logging.getLogger("naiad.engine")

#: Runs one control-plane call for a worker: ``(method, raw arguments) -> value``.
CallHandler = Callable[[str, list[msgspec.Raw]], Awaitable[Any]]


def error_message(error: BaseException) -> ErrorMsg:
    """What the worker re-raises: Triton's code and message (an unexpected exception is INTERNAL)."""
    if isinstance(error, InferenceServerError):
        return ErrorMsg(error.code.value, error.message, isinstance(error, ErrorResponse))
    if isinstance(error, asyncio.CancelledError):
        return ErrorMsg(ErrorCode.CANCELLED.value, "request cancelled")
    return ErrorMsg(ErrorCode.INTERNAL.value, f"internal error: {type(error).__name__}: {error}")


class PublishedSignatures:
    """The models' signatures as of the catalog published last: a worker that checked a request
    against that catalog (:attr:`RequestMsg.validated`) spares the engine the check, as long as the
    model still has that very signature (:meth:`DataPlane.infer` compares them by identity)."""

    def __init__(self) -> None:
        self.catalog_id = 0
        self._signatures: dict[str, ModelSignature | None] = {}
        #: The models whose requests the data plane may start at once (``DataPlane.answer_at_once``),
        #: as of that catalog: a hint that spares the others the attempt (the data plane decides).
        self._at_once: frozenset[str] = frozenset()

    def update(self, catalog_id: int, models: Mapping[str, Model]) -> None:
        self.catalog_id = catalog_id
        self._signatures = {name: model.signature for name, model in models.items()}
        self._at_once = frozenset(name for name, model in models.items() if _starts_at_once(model))

    def get(self, catalog_id: int, model: str) -> ModelSignature | None:
        """The signature a request checked under ``catalog_id`` was checked against (None: unknown)."""
        return self._signatures.get(model) if catalog_id == self.catalog_id else None

    def at_once(self, catalog_id: int, model: str) -> ModelSignature | None:
        """:meth:`get`, for a model whose requests may start at once (None otherwise)."""
        if catalog_id != self.catalog_id or model not in self._at_once:
            return None
        return self._signatures.get(model)


def _starts_at_once(model: Model) -> bool:
    versions = model.versions.values()
    return not model.decoupled and any(
        v.scheduler is not None and v.scheduler.starts_at_once for v in versions
    )


class WorkerLink:
    """One worker's requests, served by ``dataplane``; control calls go to ``calls``."""

    def __init__(
        self,
        index: int,
        dataplane: DataPlane,
        requests: Arena,
        responses: Arena,
        calls: CallHandler,
        on_serving: Callable[[WorkerLink], None],
        published: PublishedSignatures,
        *,
        request_key: int = 0,
        response_key: int = 0,
    ) -> None:
        self.index = index
        self.dataplane = dataplane
        self.requests = requests
        self.responses = responses
        self.channel: Channel[ToEngine] | None = None
        self.serving = False
        self.lost = asyncio.Event()
        self.lost_inflight = 0
        self._calls = calls
        self._on_serving = on_serving
        self._waiting: dict[int, _Steps | _AtOnceRequest] = {}
        self._acks: dict[int, asyncio.Future[None]] = {}
        self._loop = asyncio.get_running_loop()
        self._published = published
        #: Guards the bookkeeping of every request's output placements (``tensors.OutputPlacer``), and
        #: the key the response arena is lent to model processes by (0: not lent).
        self._placing = threading.Lock()
        self._response_key = response_key
        #: The key the request arena is lent to model processes by (0: not lent).
        self.request_key = request_key

    @property
    def inflight(self) -> int:
        return len(self._waiting)

    def bind(self, channel: Channel[ToEngine]) -> None:
        self.channel = channel

    def send(self, message: Any) -> None:
        if self.channel is not None:
            self.channel.send(message)

    def expect_ack(self, broadcast_id: int) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._acks[broadcast_id] = future
        return future

    # ---- incoming -----------------------------------------------------------------------------------

    def on_message(self, message: ToEngine) -> None:
        kind = type(message)
        if kind is Infer:
            assert isinstance(message, Infer)
            self._infer_soon(message)
        elif kind is Release:
            assert isinstance(message, Release)
            free = self.responses.free
            for offset in message.offsets:
                free(offset)
        elif kind is Stream:
            assert isinstance(message, Stream)
            self._start(message.id, self._stream(message))
        elif kind is Cancel:
            assert isinstance(message, Cancel)
            waiting = self._waiting.get(message.id)
            if waiting is not None:
                waiting.cancel()
        elif kind is Call:
            assert isinstance(message, Call)
            asyncio.get_running_loop().create_task(self._call(message))
        elif kind is Ack:
            assert isinstance(message, Ack)
            future = self._acks.pop(message.id, None)
            if future is not None and not future.done():
                future.set_result(None)
        elif kind is TraceEnd:
            assert isinstance(message, TraceEnd)
            self.dataplane.tracer.collect(message.id, message.model, message.records)
        elif kind is Serving:
            self.serving = True
            self._on_serving(self)

    def on_lost(self) -> None:
        """The worker is gone: cancel what it was waiting for, and every broadcast waiting on it."""
        self.serving = False
        self.lost_inflight = len(self._waiting)
        for waiting in list(self._waiting.values()):  # (a request started at once leaves it at once)
            waiting.cancel()
        for future in self._acks.values():
            if not future.done():
                future.set_result(None)
        self._acks.clear()
        self.lost.set()

    def _start(self, request_id: int, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` at once, as far as it goes without waiting: a request whose model runs inline
        is answered within this wake-up, with nothing made to carry it on.  One that has to wait is
        carried on by a :class:`_Steps` (what a task would do, for a fraction of a task's cost, paid
        by every request that waits for a model process or an instance's thread), which a ``Cancel``
        cancels; the coroutine forgets it when it ends."""
        context = contextvars.copy_context()  # what a task would give it: its own context
        try:
            waiting = context.run(work.send, None)
        except StopIteration:
            return
        steps = _Steps(work, context, self._loop)
        self._waiting[request_id] = steps
        steps.wait(waiting)

    # ---- requests -------------------------------------------------------------------------------

    def _answer(self, request_id: int, response: InferResponse, request: InferRequest, final: bool) -> Answer:
        message = tensors.response_message(response, self.requests, self.responses, None, self.request_key)
        return Answer(request_id, final, message, timestamps=request.timestamps, done=False)

    def _sample(self, message: RequestMsg) -> int:
        """The engine's verdict on a request the worker traces: sampled here, for every worker."""
        trace = self.dataplane.tracer.sample(message.model_name, message.headers)
        return trace or NOT_SAMPLED

    def _infer_soon(self, message: Infer) -> None:
        """Serve an ``Infer``: at once where the data plane can start it so (a plain request the
        worker checked, to a model whose scheduler starts requests at once, see
        ``DataPlane.answer_at_once``: no coroutine, task or future per request), else as a coroutine
        (``_infer``)."""
        plain = message.request
        signature = None if plain.traced else self._published.at_once(plain.validated, plain.model_name)
        if signature is None:
            self._start(message.id, self._infer(message))
            return
        placer = tensors.OutputPlacer(self.responses, self._placing, self._response_key, self.requests)
        try:
            request = tensors.request_from(plain, self.requests, self.request_key)
        except Exception:  # (``_infer`` answers it, in the data plane's words)
            placer.close()
            self._start(message.id, self._infer(message))
            return
        request.output_memory = placer
        pending = _AtOnceRequest(self, message.id, placer)
        try:
            waiter = self.dataplane.answer_at_once(request, signature, pending.reply)
        except Exception:  # (``_infer`` answers it, whatever it is)
            waiter = None
        if waiter is None:
            self._start(message.id, self._infer(message, request, placer))
            return
        pending.waiter = waiter
        self._waiting[message.id] = pending

    async def _infer(
        self, message: Infer, built: InferRequest | None = None, placer: tensors.OutputPlacer | None = None
    ) -> None:
        """Serve an ``Infer`` through the data plane's coroutine (``built``: its request, already made
        with ``placer``, by ``_infer_soon``)."""
        request_id = message.id
        trace = self._sample(message.request) if message.request.traced else 0
        if placer is None:
            placer = tensors.OutputPlacer(self.responses, self._placing, self._response_key, self.requests)
        try:
            request = (
                built
                if built is not None
                else tensors.request_from(message.request, self.requests, self.request_key)
            )
            request.output_memory = placer
            if trace == NOT_SAMPLED:
                request.timestamps = None
            validated = message.request.validated
            signature = self._published.get(validated, request.model_name) if validated else None
            response = await self.dataplane.infer(request, signature)
            if request.timestamps is not None:
                completed(request.timestamps)
            outputs = tensors.response_message(
                response, self.requests, self.responses, placer, self.request_key
            )
            self.send(Answer(request_id, True, outputs, None, False, True, request.timestamps, trace))
        except BaseException as error:  # every request gets its final answer, whatever happened
            self.send(Answer(request_id, True, error=error_message(error), done=True, trace=trace))
            if not isinstance(error, (InferenceServerError, asyncio.CancelledError)):
                log.exception("unhandled error serving a request from frontend worker %d", self.index)
            if not isinstance(error, Exception | asyncio.CancelledError):
                raise
        finally:
            placer.close()
            self._waiting.pop(request_id, None)

    async def _stream(self, message: Stream) -> None:
        trace = self._sample(message.request) if message.request.traced else 0
        try:
            request = tensors.request_from(message.request, self.requests, self.request_key)
            if trace == NOT_SAMPLED:
                request.timestamps = None
            async with aclosing(self.dataplane.stream(request)) as items:
                async for item, final in items:
                    if isinstance(item, EmptyFinal):
                        empty = ResponseMsg(item.model_name, item.model_version, item.id, [], {})
                        self.send(Answer(message.id, final, empty, empty=True))
                    elif isinstance(item, InferResponse):
                        self.send(self._answer(message.id, item, request, final))
                    else:
                        self.send(Answer(message.id, final, error=error_message(item)))
            self.send(Answer(message.id, True, done=True, timestamps=request.timestamps, trace=trace))
        except BaseException as error:
            self.send(Answer(message.id, True, error=error_message(error), done=True, trace=trace))
            if not isinstance(error, (InferenceServerError, asyncio.CancelledError)):
                log.exception("unhandled error streaming a request from frontend worker %d", self.index)
            if not isinstance(error, Exception | asyncio.CancelledError):
                raise
        finally:
            self._waiting.pop(message.id, None)

    async def _call(self, message: Call) -> None:
        try:
            value = await self._calls(message.method, message.args)
            self.send(Reply(message.id, msgspec.Raw(msgspec.msgpack.encode(value))))
        except Exception as error:
            if not isinstance(error, InferenceServerError):
                log.exception("unhandled error in %s for frontend worker %d", message.method, self.index)
            self.send(Reply(message.id, error=error_message(error)))


class _AtOnceRequest:
    """A request the data plane started at once (``WorkerLink._infer_soon``): its answer, sent as
    ``_infer`` sends it, and its cancellation (a ``Cancel``, or the worker's end), which answers at
    once, as a cancelled ``_infer`` does, while its execution finishes without it."""

    __slots__ = ("_id", "_link", "_placer", "waiter")

    def __init__(self, link: WorkerLink, request_id: int, placer: tensors.OutputPlacer) -> None:
        self._link = link
        self._id = request_id
        self._placer = placer
        self.waiter: AtOnce | None = None

    def reply(self, result: InferResponse | InferenceServerError) -> None:
        # (the waiter holds this reply and this its waiter: dropped, so that refcounting frees both
        # with the request; a cycle left per request made the collector a tenth of the engine's CPU)
        self.waiter = None
        link = self._link
        link._waiting.pop(self._id, None)
        try:
            if isinstance(result, InferResponse):
                outputs = tensors.response_message(
                    result, link.requests, link.responses, self._placer, link.request_key
                )
                link.send(Answer(self._id, True, outputs, None, False, True, None, 0))
            else:
                link.send(Answer(self._id, True, error=error_message(result), done=True))
        except Exception as error:  # (as ``_infer``: every request gets its final answer)
            link.send(Answer(self._id, True, error=error_message(error), done=True))
            log.exception("unhandled error serving a request from frontend worker %d", link.index)
        finally:
            self._placer.close()

    def cancel(self) -> None:
        waiter = self.waiter
        if waiter is None or waiter.abandoned:
            return
        waiter.abandon()
        self.waiter = None
        link = self._link
        link._waiting.pop(self._id, None)
        link.send(Answer(self._id, True, error=error_message(asyncio.CancelledError()), done=True))
        self._placer.close()


class _Steps:
    """Drives a request's coroutine, started outside any task, to its end as a task would, without
    one: it resumes the coroutine in its context once the future it waits on is done (a bare
    ``yield``, as ``asyncio.sleep(0)``'s, on the next loop iteration), and :meth:`cancel` cancels that
    future, so the coroutine sees ``CancelledError`` where it waits, as a cancelled task's does.

    Why not a task: a task costs every waiting request about 1.4 us of the engine's CPU more (the
    task, its step scheduled through the loop, and a coroutine frame around the request's), measured
    side by side; the engine's loop bounds the whole server.  What a task offers beyond this is not
    used on the request path: nothing there asks for ``asyncio.current_task()`` (nor ``asyncio.timeout``
    or, on Python 3.12, ``asyncio.wait_for``, which do).
    """

    __slots__ = ("_context", "_loop", "_must_cancel", "_waiting", "_work")

    def __init__(
        self, work: Coroutine[Any, Any, None], context: contextvars.Context, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._work = work
        self._context = context
        self._loop = loop
        self._waiting: asyncio.Future[Any] | None = None
        self._must_cancel = False

    def wait(self, waiting: Any) -> None:
        """Resume the coroutine once ``waiting`` (what it yielded) is done."""
        if waiting is None:
            self._loop.call_soon(self._resume, None, context=self._context)
            return
        if not getattr(waiting, "_asyncio_future_blocking", False):
            error = RuntimeError(f"a request's coroutine yielded {waiting!r}, not a future")
            self._loop.call_soon(self._throw, error, context=self._context)
            return
        waiting._asyncio_future_blocking = False  # taken over, as a task's step takes it
        self._waiting = waiting
        waiting.add_done_callback(self._resume, context=self._context)

    def cancel(self) -> None:
        """Cancel the coroutine where it waits (or where it next waits, if what it waits on is done)."""
        waiting = self._waiting
        if waiting is None or not waiting.cancel():
            self._must_cancel = True

    def _resume(self, _done: object) -> None:
        self._waiting = None
        if self._must_cancel:
            self._must_cancel = False
            self._throw(asyncio.CancelledError())
            return
        try:
            waiting = self._work.send(None)
        except StopIteration:
            return
        self.wait(waiting)

    def _throw(self, error: BaseException) -> None:
        try:
            waiting = self._work.throw(error)
        except StopIteration:
            return
        self.wait(waiting)
