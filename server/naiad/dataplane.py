"""The data plane: everything the HTTP and gRPC frontends do, once.

Frontends decode their wire format into core types, call one method here, and encode what comes back.
So the rules (which version serves, request validation, output selection and order, readiness) live in
one place and the two protocols cannot drift apart.

Requests resolve in the :class:`~naiad.repository.registry.ModelRegistry` (the published models); the
repository manager beside it takes the model control calls (load, unload, the index) and readiness.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Container, Coroutine
from contextlib import aclosing
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from naiad import log_settings
from naiad.codecs import shared_memory
from naiad.codecs.classification import LabelFiles, classify_outputs
from naiad.core.errors import InferenceServerError, InvalidArgumentError, UnavailableError, UnsupportedError
from naiad.core.request import InferRequest, InferResponse, PlainRequest, PlainResponse, Tensor
from naiad.core.shm import RegionStatus, SharedMemoryRegistry
from naiad.core.signature import ModelSignature
from naiad.core.verbose import prepared, response_outputs, state_change
from naiad.repository.manager import IndexEntry, ModelRepository
from naiad.repository.model import Model, ModelState, ModelVersion, label_file
from naiad.repository.peers import Peer, Peers
from naiad.repository.registry import ModelRegistry
from naiad.repository.residency import Residency
from naiad.scheduling.answers import answers
from naiad.scheduling.cache import ResponseCache
from naiad.statistics import model_statistics
from naiad.tracing.tracer import Changes, Tracer

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

_log = logging.getLogger("naiad.dataplane")


@dataclass(slots=True)
class EmptyFinal(InferResponse):
    """A decoupled model's final flag sent without a response: the frontends show it as an empty final
    response only to clients that ask for one (``triton_enable_empty_final_response``)."""


#: One answer of a streamed request: a response or an error, and whether it is the last.
StreamItem = tuple[InferResponse | InferenceServerError, bool]

#: Mirror copies running at most (see :meth:`DataPlane._mirror`).
MIRRORS_IN_FLIGHT = 64

SERVER_NAME = "triton"
SERVER_VERSION = "2.51.0"
#: Triton extensions this server implements (reported by ``GET /v2`` and ServerMetadata), in Triton 2.51's
#: order (NVIDIA's ``L0_server_status`` looks for each; ``schedule_policy``: request priorities and
#: timeouts under the dynamic batcher's queue policies).
EXTENSIONS = [
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]


@dataclass(frozen=True, slots=True)
class TensorMetadata:
    name: str
    datatype: str
    shape: list[int]


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


class AtOnce:
    """A request :meth:`DataPlane.answer_at_once` started: what :meth:`DataPlane._answer` does once the
    scheduler has its result (the version and the in-flight count released, the response named and
    its outputs selected as Triton answers), then the caller's ``reply``."""

    __slots__ = ("_dataplane", "_model", "_reply", "_request", "_signature", "_version", "abandoned")

    def __init__(
        self,
        dataplane: DataPlane,
        model: Model,
        version: ModelVersion,
        signature: ModelSignature,
        request: InferRequest,
        reply: Callable[[InferResponse | InferenceServerError], None],
    ) -> None:
        self._dataplane = dataplane
        self._model = model
        self._version = version
        self._signature = signature
        self._request = request
        self._reply = reply
        self.abandoned = False

    def settle(self, result: InferResponse | InferenceServerError) -> None:
        self._version.release()
        self._dataplane._done()
        if isinstance(result, InferResponse):
            result.model_name = self._model.name
            result.model_version = str(self._version.version)
            result.id = self._request.id
            result.outputs = _select_outputs(self._request, self._signature, result.outputs)
        self._reply(result)

    def abandon(self) -> None:
        """The caller went away (its client disconnected), as a cancelled :meth:`DataPlane.infer`
        goes: the request is marked cancelled (its model may see it), it counts as answered for
        draining and unloading, and its result, when it comes, counts as cancelled and goes nowhere."""
        if self.abandoned:
            return
        self.abandoned = True
        self._request.cancel()
        self._version.release()
        self._dataplane._done()


class DataPlane:
    """The server's behaviour, independent of transport."""

    #: Whether :meth:`infer_plain` answers plain requests (a frontend worker's data plane does).
    answers_plain = False

    def __init__(
        self,
        registry: ModelRegistry,
        repository: ModelRepository | None,
        *,
        strict_readiness: bool = True,
        tracer: Tracer | None = None,
        shared_memory: SharedMemoryRegistry | None = None,
        response_cache: ResponseCache | None = None,
        peers: Peers | None = None,
        server_id: str = SERVER_NAME,
    ) -> None:
        """``repository``: the manager that loads into ``registry`` (``None`` in a frontend worker,
        whose data plane sends model control to the engine); ``peers``: the servers holding the models
        not served here (``--peers-file``); ``server_id``: the name the metadata gives (``--id``)."""
        self.registry = registry
        self.server_id = server_id
        self.repository = repository
        self.strict_readiness = strict_readiness
        #: Client system shared memory regions (none can be registered unless ``--allow-client-shm``).
        self.shared_memory = shared_memory or SharedMemoryRegistry(enabled=False)
        #: The response cache (``--cache-config``), used by models with ``response_cache`` enabled.
        self.response_cache = response_cache
        self.peers = peers if peers is not None and peers.enabled else None
        self._label_files = LabelFiles()
        #: Samples requests for the trace extension; frontends ask it per request (one check when off).
        self.tracer = tracer or Tracer()
        self.started = False
        self.exiting = False
        #: Background copies of requests to mirror versions (strong references until they finish).
        self._mirrors: set[asyncio.Task[None]] = set()
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        #: Set when models load on demand: requests then record their use (LRU) and may load a model.
        self._residency: Residency | None = None
        if repository is not None and repository.residency.enabled:
            self._residency = repository.residency
        #: Whether frontends must call :meth:`admit` before decoding a request (one attribute read
        #: per request when no model loads on demand).
        self.loads_on_demand = self._residency is not None

    # ---- health and metadata ----------------------------------------------------------------

    def live(self) -> bool:
        return not self.exiting

    def ready(self) -> bool:
        if self.exiting or not self.started:
            return False
        return self._manager().all_ready() if self.strict_readiness else True

    def server_metadata(self) -> dict[str, Any]:
        return {"name": self.server_id, "version": SERVER_VERSION, "extensions": list(EXTENSIONS)}

    def model_ready(self, name: str, version: str) -> bool:
        """Whether a request for ``version`` ("" = the default version) would be served now."""
        if self.exiting:
            return False
        try:
            self.registry.resolve(name, version)
        except InferenceServerError:
            return False
        return True

    async def model_readiness(self, name: str, version: str) -> bool:
        """What a readiness request answers (``/v2/models/{name}/ready``): :meth:`model_ready`, and
        for a version whose instances are asked (see :mod:`naiad.repository.readiness`), whether
        they say they are ready now."""
        if self.exiting:
            return False
        try:
            _, chosen = self.registry.resolve(name, version)
        except InferenceServerError:
            return False
        return not chosen.checked or not await self.unready_reason(name, chosen.version)

    async def unready_reason(self, name: str, version: int) -> str:
        """Why a served version's instances are not ready ("" if they are), logged at verbose level
        1 as Triton logs it."""
        try:
            _, chosen = self.registry.resolve(name, str(version))
        except InferenceServerError as exc:
            return exc.message
        readiness = chosen.readiness
        reason = "" if readiness is None else await readiness.reason()
        if reason:
            _log.debug("Model '%s' version %d is not ready: %s", name, version, reason)
        return reason

    def model_metadata(self, name: str, version: str) -> ModelMetadata:
        model, signature = self._ready_model(name, version)
        versions = [version] if version else [str(v) for v in model.ready_versions()]
        return ModelMetadata(
            name=name,
            versions=versions,
            platform=model.platform,
            inputs=[TensorMetadata(s.name, s.datatype, signature.full_shape(s)) for s in signature.inputs],
            outputs=[TensorMetadata(s.name, s.datatype, signature.full_shape(s)) for s in signature.outputs],
        )

    def model_config(self, name: str, version: str) -> dict[str, Any]:
        model, _ = self._ready_model(name, version)
        assert model.config_json is not None
        return model.config_json

    def model_config_message(self, name: str, version: str) -> mc.ModelConfig:
        """The normalized ``ModelConfig`` protobuf (the gRPC frontend sends it as is)."""
        model, _ = self._ready_model(name, version)
        assert model.config is not None
        return model.config

    def signature(self, name: str, version: str) -> ModelSignature:
        return self._ready_model(name, version)[1]

    def is_decoupled(self, name: str, version: str) -> bool:
        return self._ready_model(name, version)[0].decoupled

    def model_folder(self, name: str, version: str) -> Path | None:
        """The folder the serving version was loaded from: the OpenAI frontend reads a language
        model's tokenizer configuration (its chat template) there."""
        return self.registry.resolve(name, version)[1].model_dir

    async def repository_index(self, ready_only: bool = False) -> list[IndexEntry]:
        return self._manager().index(ready_only)

    async def load_model(self, name: str, parameters: dict[str, Any]) -> None:
        """Repository extension: load or reload ``name`` (model control mode EXPLICIT only).

        ``parameters``: ``config`` (str), ``file:<version>/<name>`` (``str`` = base64 text as HTTP
        carries it, ``bytes`` = raw content as gRPC's ``bytes_param`` carries it) and the Naiad
        extension ``default_version`` (int, or str of digits; "" or -1 unpins): see
        :mod:`naiad.repository.overrides`.
        """
        await self._manager().load_model(name, parameters)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Repository extension: unload ``name`` (model control mode EXPLICIT only)."""
        await self._manager().unload_model(name, unload_dependents)

    # ---- statistics, trace and logging extensions -------------------------------------------------

    async def model_statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """Statistics extension: Triton's ``{"model_stats": [...]}`` (all models when ``name`` is "")."""
        return model_statistics(self.registry, name, version)

    async def trace_settings(self, model: str = "") -> dict[str, Any]:
        """Trace extension: the global settings, or those ``model`` is traced with."""
        self._check_trace_model(model)
        return self.tracer.settings(model)

    async def update_trace_settings(self, model: str, changes: Changes) -> dict[str, Any]:
        """Trace extension: change settings (values are lists of strings, ``None`` clears a key)."""
        self._check_trace_model(model)
        return self.tracer.update(model, changes)

    async def log_settings(self) -> dict[str, Any]:
        """Logging extension: the log settings in force."""
        return log_settings.document()

    async def update_log_settings(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Logging extension: change log settings now (``log_file`` only at start)."""
        return log_settings.update(changes)

    # ---- client shared memory (calls, so that a frontend worker can make them in the engine) --------

    async def region_status(self, name: str = "") -> list[RegionStatus]:
        """System shared memory extension: the registered regions (one, when ``name`` is given)."""
        return self.shared_memory.status(name)

    async def register_region(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.shared_memory.register(name, key, offset, byte_size)

    async def unregister_region(self, name: str = "") -> None:
        """Unregister ``name`` (every region when ``name`` is "")."""
        self.shared_memory.unregister(name)

    def _check_trace_model(self, model: str) -> None:
        if model and self.registry.unique(model) is None:
            raise InvalidArgumentError(f"Request for unknown model : {model}")

    def _manager(self) -> ModelRepository:
        if self.repository is None:
            raise UnavailableError("model control is not available in this process")
        return self.repository

    def _ready_model(self, name: str, version: str) -> tuple[Model, ModelSignature]:
        model, _ = self.registry.resolve(name, version)
        assert model.signature is not None
        return model, model.signature

    # ---- forwarding to peers ------------------------------------------------------------------

    def peer(self, name: str, version: str, forwarded: bool) -> Peer | None:
        """The peer a request for ``name`` (``version``) goes to instead of being served here: one that
        holds the model (round robin) when it does not serve here, else ``None`` (served, on-demand
        loaded or refused here as without peers).  ``forwarded``: the request came from a peer, and is
        never sent on again (two servers that each believe the other holds a model cannot loop)."""
        peers = self.peers
        if peers is None or forwarded or self.model_ready(name, version):
            return None
        return peers.choose(name)

    def forwarded(self, name: str) -> None:
        """A request for ``name`` was sent to a peer (``naiad_forwarded_requests_total``)."""
        if self.peers is not None:
            self.peers.count(name)

    # ---- inference ----------------------------------------------------------------------------

    async def admit(self, name: str) -> None:
        """Before a request for ``name`` is decoded: a ``--load-on-demand`` model that does not serve
        is loaded now (decoding needs its configuration), shared with concurrent requests for it."""
        residency = self._residency
        if residency is None or not residency.on_demand(name):
            return
        model = self.registry.find(name)
        if model is not None and model.latest_ready() is not None:
            return
        await self._manager().demand(name)

    async def _route(self, request: InferRequest, residency: Residency) -> tuple[Model, ModelVersion]:
        """The version that runs ``request`` when models load on demand: loaded again if it was
        evicted since the request was admitted, and counted as used (LRU, hit or miss)."""
        name = request.model_name
        try:
            routed = self.registry.route(request)
        except InferenceServerError:
            model = self.registry.find(name)
            if not residency.on_demand(name) or (model is not None and model.latest_ready() is not None):
                raise
            await self._manager().demand(name)
            routed = self.registry.route(request)
        residency.used(name)
        return routed

    async def infer_plain(
        self, request: PlainRequest, headers: dict[str, str], encode: Callable[[PlainResponse], bytes]
    ) -> bytes | None:
        """A plain request's response as ``encode`` makes it, without arrays, where this data plane
        can answer one so (:attr:`answers_plain`); ``None``: decode the request and call :meth:`infer`.
        A model in this process needs the request's arrays anyway: none is answered here."""
        return None

    def infer(
        self, request: InferRequest, validated: ModelSignature | None = None
    ) -> Coroutine[Any, Any, InferResponse]:
        """Validate, schedule and shape the response for one request: await what this returns.

        ``validated``: a signature ``request`` was already checked against (by a frontend worker); when
        it is the one the model has now, the check is not repeated.  (This and :meth:`_infer` are
        plain functions returning the coroutine that answers, and raise what they refuse at once:
        a coroutine frame less each, per request, on the path that bounds the server.)
        """
        if self.exiting:
            raise UnavailableError("Server is exiting")
        return self._infer(request, validated)

    def _infer(
        self, request: InferRequest, validated: ModelSignature | None = None
    ) -> Coroutine[Any, Any, InferResponse]:
        """:meth:`infer` for requests already let in (a BLS call of one runs while the server drains)."""
        residency = self._residency
        if residency is None:
            model, version = self.registry.route(request)
            return self._run(request, model, version, validated)
        return self._routed(request, residency, validated)

    async def _routed(
        self, request: InferRequest, residency: Residency, validated: ModelSignature | None
    ) -> InferResponse:
        model, version = await self._route(request, residency)
        return await self._run(request, model, version, validated)

    def _run(
        self,
        request: InferRequest,
        model: Model,
        version: ModelVersion,
        validated: ModelSignature | None = None,
    ) -> Coroutine[Any, Any, InferResponse]:
        """:meth:`_infer` once the version that runs ``request`` is chosen: the request is checked
        here, at once, and the coroutine returned answers it."""
        signature = model.signature
        assert signature is not None
        verbose = _log.isEnabledFor(logging.DEBUG)
        if signature is not validated or verbose:
            batch = signature.validate(request)
            if verbose:
                _log.debug(prepared(request, version.version, batch if signature.max_batch_size else 0))
                _log.debug(state_change(request.id, "INITIALIZED", "PENDING"))
        if model.decoupled:
            raise UnsupportedError(f"model '{model.name}' is decoupled: its responses can only be streamed")
        if model.mirror is not None:
            self._mirror(request, model, version)
        if request.outputs is not None:
            for output in request.outputs:
                if output.parameters:  # it goes to shared memory or asks for classification
                    return self._answer_into_memory(request, model, version, signature)
        if request.regions is not None:  # its inputs came from shared memory
            return self._answer_into_memory(request, model, version, signature)
        return self._answer(request, model, version, signature, verbose)  # the common case

    async def _answer(
        self,
        request: InferRequest,
        model: Model,
        version: ModelVersion,
        signature: ModelSignature,
        verbose: bool,
    ) -> InferResponse:
        """The model's answer with the outputs asked for, counted in flight (a drain waits for it),
        named as Triton names it."""
        self._begin()
        cache = self.response_cache
        try:
            if cache is None or not model.caches_responses or version.scheduler is None:
                scheduler = version.admit()
                try:
                    response = await scheduler.submit(request)
                finally:
                    version.release()
            else:  # from the response cache when the model uses it and has this one
                stats = version.scheduler.stats
                response = await cache.answer(request, model.key, version.version, stats, version.submit)
        finally:
            self._done()
        response.model_name = model.name
        response.model_version = str(version.version)
        response.id = request.id
        response.outputs = _select_outputs(request, signature, response.outputs)
        if verbose:
            for line in response_outputs(response):
                _log.debug(line)
        return response

    def answer_at_once(
        self,
        request: InferRequest,
        validated: ModelSignature,
        reply: Callable[[InferResponse | InferenceServerError], None],
    ) -> AtOnce | None:
        """Start ``request`` now and give ``reply`` what :meth:`infer` would answer (on the loop, never
        from within this call), without a coroutine; or ``None``, with nothing done, where only
        :meth:`infer` serves it.  For a frontend worker's plain requests (``validated``: the signature
        the worker checked it against), which are most of an engine's work: the same rules as
        :meth:`_run` and :meth:`_answer` for a request none of their options apply to (a model that
        is not decoupled, mirrored, cached or loaded on demand, outputs without parameters, inputs not
        from client shared memory, no verbose logging), whose scheduler starts it at once
        (:meth:`Scheduler.start_at_once`: no queue, no sequence, no ensemble).  Cancel it through
        :meth:`AtOnce.abandon`."""
        if self.exiting or self._residency is not None or request.regions is not None:
            return None
        if request.outputs is not None:
            for output in request.outputs:
                if output.parameters:
                    return None
        try:  # (a request refused here is refused by ``infer``, in its words)
            model, version = self.registry.route(request)
        except InferenceServerError:
            return None
        if (
            version.state is not ModelState.READY
            or version.scheduler is None
            or model.signature is not validated
            or model.mirror is not None
            or model.decoupled
            or (self.response_cache is not None and model.caches_responses)
            or _log.isEnabledFor(logging.DEBUG)
        ):
            return None
        scheduler = version.admit()
        waiter = AtOnce(self, model, version, validated, request, reply)
        self._begin()
        if not scheduler.start_at_once(request, waiter):
            self._done()
            version.release()
            return None
        return waiter

    async def _answer_into_memory(
        self, request: InferRequest, model: Model, version: ModelVersion, signature: ModelSignature
    ) -> InferResponse:
        """:meth:`_answer` for a request with outputs to write into shared memory or to classify, or
        inputs read from shared memory: its regions are held until it is answered."""
        held = shared_memory.hold(self.shared_memory, request)
        try:
            response = await self._answer(request, model, version, signature, False)
            response.outputs = classify_outputs(
                request, signature, partial(label_file, model, version), response.outputs, self._label_files
            )
            shared_memory.write_outputs(held.targets, response.outputs)
        finally:
            shared_memory.release(self.shared_memory, held)
        return response

    def in_flight(self) -> int:
        """Requests being answered now (streams included; BLS calls and mirror copies are not)."""
        return self._inflight

    def _begin(self) -> None:
        """One more request in flight (a drain waits for :meth:`_done`); the idle event is cleared
        only by the first, as the loop starts tens of thousands a second."""
        if not self._inflight:
            self._idle.clear()
        self._inflight += 1

    def _done(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._idle.set()

    def _mirror(self, request: InferRequest, model: Model, version: ModelVersion) -> None:
        """Copy ``request`` to the model's mirror version in the background if it is in the mirrored
        share (see :meth:`ModelRegistry.mirror`).  The copy owns its inputs (the client's buffers
        or a worker's arena block are reused once the client is answered) and asks for no output
        placement; its answer is dropped and its outcome only counted in that version's statistics.
        Beyond :data:`MIRRORS_IN_FLIGHT` copies are skipped, so a slow mirror cannot pile up work."""
        target = self.registry.mirror(model, version, request)
        if target is None or len(self._mirrors) >= MIRRORS_IN_FLIGHT:
            return
        copy = InferRequest(
            request.model_name,
            str(target.version),
            request.id,
            [Tensor(t.name, t.datatype, t.data.copy()) for t in request.inputs],
            parameters=dict(request.parameters),
            priority=request.priority,
            timeout_us=request.timeout_us,
        )
        task = asyncio.get_running_loop().create_task(_mirrored(target, copy))
        self._mirrors.add(task)
        task.add_done_callback(self._mirrors.discard)

    async def stream(self, request: InferRequest) -> AsyncGenerator[StreamItem, None]:
        """Every answer to one request, in order: ``(response or error, final)``.

        A decoupled model answers 0..N times and then says it is done (an :class:`EmptyFinal` when
        it says so without a response); any other model answers once, with ``final``.  An error
        before the model runs is raised; errors the model reports for the request come as items.
        Closing the iterator early marks the request cancelled.
        """
        if self.exiting:
            raise UnavailableError("Server is exiting")
        async for item in self._stream(request):
            yield item

    async def _stream(self, request: InferRequest) -> AsyncGenerator[StreamItem, None]:
        residency = self._residency
        if residency is None:
            model, version = self.registry.route(request)
        else:
            model, version = await self._route(request, residency)
        if not model.decoupled:
            yield await self._run(request, model, version), True
            return
        signature = model.signature
        assert signature is not None
        signature.validate(request)
        self._begin()
        try:
            async with aclosing(answers(request, version.submit)) as items:
                async for answer, final in items:
                    if answer is None:
                        answer = EmptyFinal(model.name, str(version.version), request.id)
                    elif isinstance(answer, InferResponse):
                        answer.model_name = model.name
                        answer.model_version = str(version.version)
                        answer.id = request.id
                        answer.outputs = _select_outputs(request, signature, answer.outputs)
                    yield answer, final
        finally:
            self._done()

    async def drain(self, timeout: float) -> bool:
        """Refuse new requests and wait up to ``timeout`` seconds for in-flight ones, saying each
        second, in tritonserver's words, which model versions still have some."""
        self.exiting = True
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            left = deadline - asyncio.get_running_loop().time()
            busy = [
                (model.name, number, version.inflight)
                for model in self.registry.models().values()
                for number, version in model.versions.items()
                if version.inflight > 0
            ]
            seconds = max(0, round(left))
            found = "Timeout %d: Found %d model versions that have in-flight inferences"
            _log.info(found, seconds, len(busy))
            for name, number, count in busy:
                _log.info("Model '%s' (version %d) has %d in-flight inferences", name, number, count)
            if self._idle.is_set():
                return True
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._idle.wait(), min(1.0, left))
            except TimeoutError:
                pass


class BlsServer:
    """What Python models' BLS calls go through (:class:`naiad.backends.python.bls.Server`): the
    data plane's own inference, without the door check (the calling request is already in).  The
    composition root puts it in the runtime the backends were made with; ``loop`` is the one the
    data plane serves on."""

    def __init__(self, dataplane: DataPlane, loop: asyncio.AbstractEventLoop) -> None:
        self._dataplane = dataplane
        self._loop = loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    async def infer(self, request: InferRequest) -> InferResponse:
        return await self._dataplane._infer(request)

    def stream(self, request: InferRequest) -> AsyncIterator[StreamItem]:
        return self._dataplane._stream(request)

    def check(self, request: InferRequest) -> tuple[int, bool]:
        """The version is chosen here, once: a request naming none is pinned to it, so that the call
        that runs it (inline or not) gets the version this answer names even with version weights."""
        model, version = self._dataplane.registry.route(request)
        if not request.model_version and model.version_weights is not None:
            request.model_version = str(version.version)
        assert model.signature is not None
        model.signature.validate(request)
        return version.version, model.decoupled

    async def load_model(self, name: str, parameters: dict[str, Any]) -> None:
        await self._dataplane.load_model(name, parameters)

    async def unload_model(self, name: str, unload_dependents: bool) -> None:
        await self._dataplane.unload_model(name, unload_dependents)

    async def model_ready(self, name: str, version: str) -> bool:
        return await self._dataplane.model_readiness(name, version)


async def _mirrored(version: ModelVersion, request: InferRequest) -> None:
    """Run a mirror copy; its answer and error are dropped (the version's statistics count them)."""
    try:
        await version.submit(request)
    except InferenceServerError as error:
        _log.debug(
            "mirror request to '%s' version %d failed: %s", request.model_name, version.version, error.message
        )
    except Exception:
        _log.exception("mirror request to '%s' version %d failed", request.model_name, version.version)


def _select_outputs(request: InferRequest, signature: ModelSignature, produced: list[Tensor]) -> list[Tensor]:
    """What a response carries of the outputs the model produced, as Triton answers (checked side by
    side with Triton 2.51, HTTP and gRPC): those the request named, or the config's when it named none,
    in the order the model produced them, whatever order the request named them in.  An output the
    model produced outside its config is left out; one it did not produce is not in the answer, which
    is no error (Triton's Python backend prunes a response to the requested names, which Triton fills
    with the config's outputs when a request names none)."""
    if request.outputs is None:
        wanted: Container[str] = signature.outputs_by_name
    else:
        wanted = {output.name for output in request.outputs}
    for tensor in produced:
        if tensor.name not in wanted:
            return [tensor for tensor in produced if tensor.name in wanted]
    return produced
