"""What the repository knows about each model and each of its versions."""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from naiad.backends.base import InstanceHealth
from naiad.core.errors import UnavailableError
from naiad.core.request import InferRequest, InferResponse, ResponseSink
from naiad.core.signature import ModelSignature
from naiad.repository.layout import model_key
from naiad.repository.readiness import Readiness
from naiad.repository.routing import Mirror
from naiad.scheduling.scheduler import Scheduler

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

    from naiad.scheduling.stats import SchedulerStats
    from naiad.scheduling.worker import InstanceWorker

#: The reason Triton gives a version that was unloaded on purpose (it does not count against readiness).
UNLOADED = "unloaded"


class ModelState(enum.Enum):
    """Triton's model version states, as the repository index reports them."""

    UNKNOWN = "UNKNOWN"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"


@dataclass(slots=True, eq=False)
class ModelVersion:
    """One version: its state, why it is in that state, and its scheduler while READY.

    Requests go through :meth:`submit`, which counts them, so unloading can stop new requests at once
    and still let the ones already submitted finish before the instances are released.
    ``fingerprint`` identifies what was loaded (configuration and files); a reload whose fingerprint
    for this version is unchanged keeps this object instead of loading the version again.
    ``model_dir`` is the folder it was loaded from and ``scratch`` the temporary folder of a load
    with file overrides, removed once no version uses it.  ``load_ns`` is how long building it took
    and ``memory_bytes`` the resident memory that grew meanwhile (see :mod:`naiad.repository.footprint`).
    """

    version: int
    state: ModelState = ModelState.LOADING
    reason: str = ""
    scheduler: Scheduler | None = None
    fingerprint: str = ""
    model_name: str = ""
    model_dir: Path | None = None
    scratch: Path | None = None
    load_ns: int = 0
    memory_bytes: int = 0
    #: What used memory grew by on each GPU (by CUDA index) while it loaded; empty without GPUs.
    gpu_memory_bytes: tuple[int, ...] = ()
    #: What its instances report about their model processes (restarts; giving up, see ``fail``).
    health: InstanceHealth | None = None
    #: The fingerprint without the instance groups: a reload that changes only those updates the
    #: instances in place (``ModelLoader.build_version``), which ``workers`` are then handed over from.
    base_fingerprint: str = ""
    workers: tuple[InstanceWorker, ...] = ()
    #: Its ``passive`` instances (never scheduled), released with the version.
    passive: tuple[InstanceWorker, ...] = ()
    #: Set by ``fail``: UNAVAILABLE because its model kept crashing after it loaded.
    crashed: bool = False
    #: Label files of outputs whose config names none, borrowed at load: an ensemble's, from the step
    #: model that makes the output (as Triton's core completes an ensemble's labels).
    labels: dict[str, Path] = field(default_factory=dict)
    #: Whether a readiness request asks its instances (see :mod:`naiad.repository.readiness`), and,
    #: in the engine, what it asks (a frontend worker asks the engine).
    checked: bool = False
    readiness: Readiness | None = None
    inflight: int = 0
    _drained: asyncio.Event | None = None

    async def submit(self, request: InferRequest) -> InferResponse:
        """Run one request on this version; UNAVAILABLE once the version stopped serving.  (The path
        of a decoupled model's requests, from a client's stream or an ensemble's step: their first
        response is timed here when Triton's first-response histogram counts them.)"""
        scheduler = self.admit()
        try:
            stats = scheduler.stats
            if request.responses is not None and stats.first_response_buckets is not None:
                if not stats.first_response_in_observe:
                    request.responses = _first_timed(request.responses, stats)
            return await scheduler.submit(request)
        finally:
            self.release()

    def admit(self) -> Scheduler:
        """Let one request in (UNAVAILABLE once the version stopped serving): the scheduler to submit
        it to; :meth:`release` once it is answered.  (:meth:`submit` in two halves, for the data
        plane's own path, which spares a coroutine frame per request this way.)"""
        scheduler = self.scheduler
        if scheduler is None or self.state is not ModelState.READY:
            raise UnavailableError(
                f"Request for unknown model: '{self.model_name}' version {self.version} is not at ready state"
            )
        self.inflight += 1
        return scheduler

    def release(self) -> None:
        """A request :meth:`admit` let in is answered (an unload waits for the last one)."""
        self.inflight -= 1
        if self.inflight == 0 and self._drained is not None:
            self._drained.set()

    def fail(self, reason: str) -> None:
        """UNAVAILABLE with ``reason``: an instance gave up restarting its crashing model process.

        Requests are refused from now on; the instances stay until the model is loaded again or
        unloaded.  Such a version still counts as ready for strict readiness (see
        ``counts_as_ready``): one crashing model must not take the server out of service.
        """
        if self.state is ModelState.READY:
            self.reason = reason
            self.crashed = True
            self.state = ModelState.UNAVAILABLE

    def stop(self) -> None:
        """Refuse new requests from now on (state UNLOADING); those already submitted carry on."""
        self.state = ModelState.UNLOADING

    async def unload(self) -> None:
        """Stop, wait for the requests already submitted, then release the instances (off the loop)."""
        self.stop()
        if self.inflight:
            self._drained = asyncio.Event()
            await self._drained.wait()
        scheduler, self.scheduler = self.scheduler, None
        if scheduler is not None:
            await asyncio.to_thread(scheduler.close)
        passive, self.passive = self.passive, ()
        for worker in passive:
            await asyncio.to_thread(worker.close)
        self.reason = UNLOADED
        self.state = ModelState.UNAVAILABLE

    @property
    def counts_as_ready(self) -> bool:
        """Strict readiness: READY, unloaded on purpose, or failed at run time (a model that kept
        crashing after it loaded: the server itself and its other models still serve, as with
        Triton, whose readiness ignores a crashing stub)."""
        return self.state is ModelState.READY or (
            self.state is ModelState.UNAVAILABLE and (self.reason == UNLOADED or self.crashed)
        )


def label_file(model: Model, version: ModelVersion, output: str) -> Path | None:
    """Where the labels of ``model``'s ``output`` are read for classification: its config's
    ``label_filename`` in the folder ``version`` was loaded from, else one ``version`` borrowed."""
    signature = model.signature
    spec = signature.output_spec(output) if signature is not None else None
    if spec is not None and spec.label_filename and version.model_dir is not None:
        return version.model_dir / spec.label_filename
    return version.labels.get(output)


@dataclass(slots=True, eq=False)
class Model:
    """A model the repository has tried to load.

    ``config`` and ``signature`` are ``None`` when the model failed before its configuration could be
    read; ``reason`` then says why and the model has no versions.  ``default_version`` is the pinned
    version that serves requests naming none (``None``: the highest READY version, as Triton);
    ``version_weights`` (when set, instead of the pin) spreads them over versions by weight and
    ``mirror`` copies a share of them to a shadow version (see :mod:`naiad.repository.registry`);
    ``dependencies`` names the models loaded along with it because it needs them (an ensemble's
    steps): ``unload_dependents`` unloads them too, unless another loaded model still needs them;
    ``source_fingerprint`` is the state of the model folder it was loaded from (POLL compares it);
    ``namespace`` is its repository under ``--model-namespacing`` (its :attr:`key` then differs from
    its name, which other repositories' models may share).  ``removed``: its folder left the
    repository (POLL) and it was unloaded; kept, as Triton keeps it, so requests for it answer that it
    has no available versions, but no longer listed in the index.
    """

    name: str
    path: Path
    config: mc.ModelConfig | None = None
    signature: ModelSignature | None = None
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    reason: str = ""
    config_json: dict[str, Any] | None = None
    default_version: int | None = None
    dependencies: tuple[str, ...] = ()
    source_fingerprint: str = ""
    version_weights: dict[int, int] | None = None
    mirror: Mirror | None = None
    namespace: str = ""
    removed: bool = False

    @property
    def key(self) -> str:
        """What the server knows it by (:func:`~naiad.repository.layout.model_key`)."""
        return model_key(self.name, self.namespace)

    @property
    def platform(self) -> str:
        if self.config is None:
            return ""
        return str(self.config.platform or self.config.backend)

    @property
    def caches_responses(self) -> bool:
        """Whether its configuration enables the response cache (``response_cache { enable }``)."""
        return self.config is not None and self.config.response_cache.enable

    @property
    def decoupled(self) -> bool:
        return bool(self.config is not None and self.config.model_transaction_policy.decoupled)

    def ready_versions(self) -> list[int]:
        return sorted(v for v, mv in self.versions.items() if mv.state is ModelState.READY)

    def latest_ready(self) -> ModelVersion | None:
        """The highest READY version (what a request naming none gets), without sorting: per request."""
        latest: ModelVersion | None = None
        for number, mv in self.versions.items():
            if (latest is None or number > latest.version) and mv.state is ModelState.READY:
                latest = mv
        return latest

    def serving(self) -> list[ModelVersion]:
        """Versions holding instances (READY, or draining while UNLOADING)."""
        return [mv for mv in self.versions.values() if mv.scheduler is not None]

    @property
    def state(self) -> ModelState:
        """READY if any version is; otherwise the state of the model as a whole."""
        if self.ready_versions():
            return ModelState.READY
        if any(mv.state is ModelState.LOADING for mv in self.versions.values()):
            return ModelState.LOADING
        return ModelState.UNAVAILABLE


def _first_timed(sink: ResponseSink, stats: SchedulerStats) -> ResponseSink:
    """``sink``, counting the time to the first answer with a response in ``stats`` (on the event
    loop, which alone writes statistics; a model answers from its own threads)."""
    loop = asyncio.get_running_loop()
    started = time.monotonic_ns()
    waiting = True

    def timed(answer: Any, final: bool) -> None:
        nonlocal waiting
        if waiting and answer is not None:
            waiting = False
            elapsed = time.monotonic_ns() - started
            try:
                loop.call_soon_threadsafe(stats.first_response, elapsed)
            except RuntimeError:  # the loop is closed: the server is gone
                pass
        sink(answer, final)

    return timed
