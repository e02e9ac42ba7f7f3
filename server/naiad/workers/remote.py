"""A worker's data plane: the in-process :class:`~naiad.dataplane.DataPlane`'s behaviour, with the engine
doing what needs shared state.

Metadata, config, model readiness and the checks made before a request is decoded are answered from the
worker's copy of the engine's catalog, by the in-process code itself (the catalog fills a model registry
with the same models); inference, statistics, the repository index, model control, trace and log settings
and client shared-memory registration go to the engine over the channel.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import weakref
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from naiad import log_settings
from naiad.core.errors import ErrorCode, ErrorResponse, InferenceServerError, UnavailableError
from naiad.core.request import InferRequest, InferResponse, PlainRequest, PlainResponse
from naiad.core.shm import RegionStatus, SharedMemoryRegistry
from naiad.core.signature import ModelSignature
from naiad.dataplane import DataPlane, EmptyFinal, StreamItem
from naiad.engine import catalog
from naiad.ipc import tensors
from naiad.ipc.arena import Arena
from naiad.ipc.channel import Channel
from naiad.ipc.messages import (
    INLINE,
    RESPONSE_ARENA,
    Ack,
    Answer,
    Call,
    Cancel,
    Catalog,
    ErrorMsg,
    Infer,
    LogChange,
    RegionChange,
    Release,
    Reply,
    RequestMsg,
    ResponseMsg,
    Stream,
    ToWorker,
    TraceChange,
)
from naiad.repository.manager import IndexEntry
from naiad.repository.peers import Peers
from naiad.repository.registry import ModelRegistry
from naiad.repository.residency import Residency
from naiad.settings import ServerSettings
from naiad.tracing.tracer import Changes
from naiad.workers.tracer import WorkerTracer

log = logging.getLogger("naiad.worker")

_CODES = {code.value: code for code in ErrorCode}
#: The error a request gets when the engine went away under it.
ENGINE_GONE = "the inference engine stopped: the server is restarting"


def raise_error(message: ErrorMsg) -> InferenceServerError:
    kind = ErrorResponse if message.response else InferenceServerError
    return kind(message.message, _CODES.get(message.code, ErrorCode.INTERNAL))


class CatalogCopy:
    """The engine's catalog as last published to this worker: its models in a registry of the worker's
    own (no schedulers: requests go to the engine, which chooses their versions), and readiness."""

    def __init__(self) -> None:
        self.registry = ModelRegistry()
        self.ready = False
        self.started = False
        #: The id of the catalog applied last (0: none yet).
        self.id = 0

    def apply(self, message: Catalog) -> None:
        models = catalog.models(message)
        for name in set(self.registry.models()) - set(models):
            self.registry.retire(name)
        for model in models.values():
            self.registry.publish(model)
        self.ready = message.ready
        self.started = message.started
        self.id = message.id


@dataclass(slots=True, eq=False)
class _Pending:
    """A request sent to the engine and not finished there yet."""

    blocks: list[tuple[int, int]]
    future: asyncio.Future[Answer] | None = None
    queue: asyncio.Queue[Answer] | None = None
    abandoned: bool = False
    answers: list[Answer] = field(default_factory=list)


class EngineLink:
    """The worker's end of the channel: requests out, answers in, broadcasts applied and acknowledged."""

    def __init__(
        self,
        requests: Arena,
        responses: Arena,
        catalog: CatalogCopy,
        shared_memory: SharedMemoryRegistry,
        tracer: WorkerTracer,
    ) -> None:
        self.requests = requests
        self.responses = responses
        self.catalog = catalog
        self.shared_memory = shared_memory
        self.tracer = tracer
        self.channel: Channel[ToWorker] | None = None
        self.lost = asyncio.Event()
        #: Built on the worker's loop: asked for per request, the loop would cost a ``getpid`` system
        #: call each time on Python 3.11 (``get_running_loop``'s fork check).
        self._loop = asyncio.get_running_loop()
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._calls: dict[int, asyncio.Future[Reply]] = {}
        self._refs: dict[int, int] = {}
        self._released: list[int] = []
        self._release_scheduled = False

    def bind(self, channel: Channel[ToWorker]) -> None:
        self.channel = channel

    def send(self, message: Any) -> None:
        if self.channel is None or self.lost.is_set():
            raise UnavailableError(ENGINE_GONE)
        self.channel.send(message)

    # ---- incoming ---------------------------------------------------------------------------------

    def on_message(self, message: ToWorker) -> None:
        if type(message) is Answer:
            assert isinstance(message, Answer)
            self._on_answer(message)
        elif isinstance(message, Reply):
            future = self._calls.pop(message.id, None)
            if future is not None and not future.done():
                future.set_result(message)
        elif isinstance(message, Catalog):
            self.catalog.apply(message)
            self.send(Ack(message.id))
        elif isinstance(message, RegionChange):
            self._region(message)
            self.send(Ack(message.id))
        elif isinstance(message, TraceChange):
            try:
                self.tracer.update(message.model, message.changes)
            except InferenceServerError as error:
                log.warning("trace settings change not applied in this worker: %s", error.message)
            self.send(Ack(message.id))
        elif isinstance(message, LogChange):
            log_settings.update(msgspec.msgpack.decode(message.changes, type=dict[str, Any]))
            self.send(Ack(message.id))

    def on_lost(self) -> None:
        self.lost.set()
        for pending in self._pending.values():
            answer = Answer(0, True, error=ErrorMsg(ErrorCode.UNAVAILABLE.value, ENGINE_GONE), done=True)
            if pending.future is not None and not pending.future.done():
                pending.future.set_result(answer)
            elif pending.queue is not None:
                pending.queue.put_nowait(answer)
        self._pending.clear()
        for call in self._calls.values():
            if not call.done():
                call.set_result(Reply(0, error=ErrorMsg(ErrorCode.UNAVAILABLE.value, ENGINE_GONE)))
        self._calls.clear()

    def _region(self, change: RegionChange) -> None:
        try:
            self.shared_memory.forget(change.name)
            if change.key is not None:
                self.shared_memory.register(change.name, change.key, change.offset, change.byte_size)
        except InferenceServerError as error:
            log.warning(
                "shared memory region '%s' not mirrored in this worker: %s", change.name, error.message
            )

    def _on_answer(self, answer: Answer) -> None:
        pending = self._pending.get(answer.id)
        if pending is None:
            self._drop(answer)
            return
        if answer.done:
            del self._pending[answer.id]
        if pending.abandoned:
            self._drop(answer)
            if answer.done:
                self._unref_all(pending)
            return
        if pending.future is not None:
            pending.future.set_result(answer)
        elif pending.queue is not None:
            pending.queue.put_nowait(answer)

    # ---- arena blocks -------------------------------------------------------------------------------

    def _drop(self, answer: Answer) -> None:
        """Give back the response blocks of an answer nobody will read."""
        response = answer.response
        if response is not None:
            for ref in response.outputs:
                if ref.arena == RESPONSE_ARENA:
                    self._release(ref.offset)

    def _release(self, offset: int) -> None:
        self._released.append(offset)
        if not self._release_scheduled and not self.lost.is_set():
            self._release_scheduled = True
            self._loop.call_soon(self._send_releases)

    def _send_releases(self) -> None:
        self._release_scheduled = False
        released, self._released = self._released, []
        if released and not self.lost.is_set():
            self.send(Release(released))

    def _unref(self, offset: int) -> None:
        count = self._refs[offset] - 1
        if count:
            self._refs[offset] = count
        else:
            del self._refs[offset]
            self.requests.free(offset)

    def _unref_all(self, pending: _Pending) -> None:
        for offset, _ in pending.blocks:
            self._unref(offset)
        pending.blocks = []

    def _response(self, message: ResponseMsg, pending: _Pending) -> InferResponse:
        def keep(array: np.ndarray[Any, Any], arena: int, offset: int) -> None:
            if arena == RESPONSE_ARENA:
                weakref.finalize(array, self._release, offset)
                return
            for start, size in pending.blocks:
                if start <= offset < start + max(size, 1):
                    self._refs[start] += 1
                    weakref.finalize(array, self._unref, start)
                    return

        return tensors.response_from(message, self.requests, self.responses, keep)

    # ---- requests -----------------------------------------------------------------------------------

    def _submit(self, request: InferRequest, stream: bool, validated: int = 0) -> tuple[int, _Pending]:
        offsets: list[int] = []
        message = tensors.request_message(request, self.requests, offsets)
        message.validated = validated
        return self._send_request(message, stream)

    def _send_request(self, message: RequestMsg, stream: bool) -> tuple[int, _Pending]:
        """Send a request whose inputs are placed; its id, and what waits for its answers."""
        blocks = [(ref.offset, ref.nbytes) for ref in message.inputs if ref.arena != INLINE]
        for offset, _ in blocks:
            self._refs[offset] = 1
        request_id = next(self._ids)
        if stream:
            pending = _Pending(blocks, queue=asyncio.Queue())
        else:
            pending = _Pending(blocks, future=self._loop.create_future())
        self._pending[request_id] = pending
        try:
            self.send(Stream(request_id, message) if stream else Infer(request_id, message))
        except BaseException:
            del self._pending[request_id]
            self._unref_all(pending)
            raise
        return request_id, pending

    def _abandon(self, request_id: int, pending: _Pending) -> None:
        """The caller stopped waiting: the engine cancels the request; its blocks come back with its
        final answer."""
        if request_id not in self._pending:
            self._unref_all(pending)
            return
        pending.abandoned = True
        if not self.lost.is_set():
            self.send(Cancel(request_id))

    def _traced(self, timestamps: list[tuple[str, int]], answer: Answer) -> None:
        """A traced request's final answer: the engine's points and its sampling verdict."""
        if answer.timestamps:
            timestamps += [tuple(point) for point in answer.timestamps]  # type: ignore[misc]
        if answer.trace:
            self.tracer.verdict(timestamps, answer.trace)

    async def _answer(self, request_id: int, pending: _Pending) -> Answer:
        """The answer to a request answered once; if the caller stops waiting for it, the engine
        cancels the request (or its answer, come meanwhile, is given back)."""
        future = pending.future
        assert future is not None
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._drop(future.result())
                self._unref_all(pending)
            else:
                self._abandon(request_id, pending)
            raise

    async def infer(self, request: InferRequest, validated: int = 0) -> InferResponse:
        """``request``'s response from the engine; ``validated``: see :attr:`RequestMsg.validated`."""
        request_id, pending = self._submit(request, stream=False, validated=validated)
        answer = await self._answer(request_id, pending)
        try:
            if request.timestamps is not None:
                self._traced(request.timestamps, answer)
            if answer.error is not None:
                raise raise_error(answer.error)
            assert answer.response is not None
            return self._response(answer.response, pending)
        finally:
            self._unref_all(pending)

    async def infer_plain(
        self,
        request: PlainRequest,
        headers: dict[str, str],
        validated: int,
        encode: Callable[[PlainResponse], bytes],
    ) -> bytes:
        """A plain request's response from the engine, as ``encode`` makes it of the outputs' bytes
        where they lie (no arrays, no :class:`InferResponse`); their blocks are released after."""
        offsets: list[int] = []
        message = tensors.plain_request_message(request, headers, self.requests, offsets)
        message.validated = validated
        request_id, pending = self._send_request(message, stream=False)
        answer = await self._answer(request_id, pending)
        try:
            if answer.error is not None:
                raise raise_error(answer.error)
            assert answer.response is not None
            return encode(tensors.plain_response(answer.response, self.requests, self.responses))
        finally:
            self._drop(answer)
            self._unref_all(pending)

    async def stream(self, request: InferRequest) -> AsyncGenerator[StreamItem, None]:
        request_id, pending = self._submit(request, stream=True)
        assert pending.queue is not None
        done = False
        try:
            while True:
                answer = await pending.queue.get()
                if answer.done:
                    done = True
                    if request.timestamps is not None:
                        self._traced(request.timestamps, answer)
                    if answer.error is not None:
                        raise raise_error(answer.error)
                    return
                if answer.empty:
                    named = answer.response
                    assert named is not None
                    yield EmptyFinal(named.model_name, named.model_version, named.id), answer.final
                elif answer.error is not None:
                    yield raise_error(answer.error), answer.final
                else:
                    assert answer.response is not None
                    yield self._response(answer.response, pending), answer.final
        finally:
            if done:
                self._unref_all(pending)
            else:
                queue = pending.queue
                while not queue.empty():
                    left = queue.get_nowait()
                    self._drop(left)
                    if left.done:
                        done = True
                if done:
                    self._unref_all(pending)
                else:
                    self._abandon(request_id, pending)

    async def call(self, method: str, *args: Any, kind: Any = Any) -> Any:
        request_id = next(self._ids)
        future: asyncio.Future[Reply] = self._loop.create_future()
        self._calls[request_id] = future
        self.send(Call(request_id, method, [msgspec.Raw(msgspec.msgpack.encode(a)) for a in args]))
        reply = await future
        if reply.error is not None:
            raise raise_error(reply.error)
        return msgspec.msgpack.decode(reply.value, type=kind)


class RemoteDataPlane(DataPlane):
    """The data plane the frontends of a worker call (see the module docstring)."""

    answers_plain = True

    def __init__(self, link: EngineLink, settings: ServerSettings) -> None:
        super().__init__(
            link.catalog.registry,
            None,
            strict_readiness=settings.strict_readiness,
            tracer=link.tracer,
            shared_memory=link.shared_memory,
            peers=Peers(settings.peers_file),
            server_id=settings.server_id,
        )
        self.link = link
        self._catalog = link.catalog
        #: Counts of forwarded requests on their way to the engine, which serves ``/metrics``.
        self._counting: set[asyncio.Task[Any]] = set()
        #: Only for its patterns: which models the engine loads on demand.
        self._demand = Residency(settings.load_on_demand)
        self.loads_on_demand = self._demand.enabled

    def ready(self) -> bool:
        return not self.exiting and self._catalog.ready

    async def admit(self, name: str) -> None:
        """An on-demand model missing from this worker's catalog is loaded by the engine, which
        publishes the new catalog before it answers (so the checks before decoding find the model)."""
        if not self._demand.on_demand(name):
            return
        model = self.registry.find(name)
        if model is not None and model.latest_ready() is not None:
            return
        await self.link.call("admit", name)

    def forwarded(self, name: str) -> None:
        """Counted in the engine (it serves the metrics), without holding up the forwarded answer."""
        task = asyncio.get_running_loop().create_task(self.link.call("forwarded", name))
        self._counting.add(task)
        task.add_done_callback(self._count_sent)

    def _count_sent(self, task: asyncio.Task[Any]) -> None:
        self._counting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("forwarded request not counted: %s", task.exception())

    async def infer(self, request: InferRequest, validated: ModelSignature | None = None) -> InferResponse:
        if self.exiting:
            raise UnavailableError("Server is exiting")
        self._inflight += 1
        self._idle.clear()
        try:
            return await self.link.infer(request, self._validate(request))
        finally:
            self._done()

    async def infer_plain(
        self, request: PlainRequest, headers: dict[str, str], encode: Callable[[PlainResponse], bytes]
    ) -> bytes | None:
        """Sent as the wire bytes it came in, once checked against the catalog as :meth:`_validate`
        checks a request; ``None`` for one that the checks refuse (or a decoupled model's, or while
        exiting): the general path answers it, with the errors the single process gives."""
        if self.exiting:
            return None
        try:
            model = self._catalog.registry.resolve(request.model_name, request.model_version)[0]
            signature = model.signature
            if signature is None or model.decoupled:
                return None
            signature.validate(request)
        except InferenceServerError:
            return None
        self._inflight += 1
        self._idle.clear()
        try:
            return await self.link.infer_plain(request, headers, self._catalog.id, encode)
        finally:
            self._done()

    def _validate(self, request: InferRequest) -> int:
        """Check ``request`` against the catalog's signature here, so that the engine need not (it
        does when its model changed since): the catalog's id, or 0 when the engine should check."""
        catalog_id = self._catalog.id
        try:
            signature = self._catalog.registry.resolve(request.model_name, request.model_version)[0].signature
            if signature is None:
                return 0
            signature.validate(request)
        except InferenceServerError:  # the engine answers: with its models, as the single process would
            return 0
        return catalog_id

    async def stream(self, request: InferRequest) -> AsyncGenerator[StreamItem, None]:
        if self.exiting:
            raise UnavailableError("Server is exiting")
        self._inflight += 1
        self._idle.clear()
        try:
            items = self.link.stream(request)
            try:
                async for item in items:
                    yield item
            finally:
                await items.aclose()
        finally:
            self._done()

    async def load_model(self, name: str, parameters: dict[str, Any]) -> None:
        await self.link.call("load_model", name, parameters)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        await self.link.call("unload_model", name, unload_dependents)

    async def model_statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        result: dict[str, Any] = await self.link.call("model_statistics", name, version, kind=dict[str, Any])
        return result

    async def unready_reason(self, name: str, version: int) -> str:
        """The engine asks the instances (and logs why one is not ready)."""
        reason: str = await self.link.call("unready_reason", name, version, kind=str)
        return reason

    async def repository_index(self, ready_only: bool = False) -> list[IndexEntry]:
        result: list[IndexEntry] = await self.link.call("repository_index", ready_only, kind=list[IndexEntry])
        return result

    async def trace_settings(self, model: str = "") -> dict[str, Any]:
        result: dict[str, Any] = await self.link.call("trace_settings", model, kind=dict[str, Any])
        return result

    async def update_trace_settings(self, model: str, changes: Changes) -> dict[str, Any]:
        result: dict[str, Any] = await self.link.call(
            "update_trace_settings", model, dict(changes), kind=dict[str, Any]
        )
        return result

    async def log_settings(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.link.call("log_settings", kind=dict[str, Any])
        return result

    async def update_log_settings(self, changes: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.link.call("update_log_settings", changes, kind=dict[str, Any])
        return result

    async def region_status(self, name: str = "") -> list[RegionStatus]:
        result: list[RegionStatus] = await self.link.call("region_status", name, kind=list[RegionStatus])
        return result

    async def register_region(self, name: str, key: str, offset: int, byte_size: int) -> None:
        await self.link.call("register_region", name, key, offset, byte_size)

    async def unregister_region(self, name: str = "") -> None:
        await self.link.call("unregister_region", name)
