"""The models of one server: loading, unloading, polling and syncing, beside the request path.

What requests see is the :class:`~naiad.repository.registry.ModelRegistry`; this manager decides what is
in it and publishes each model there when a load (or an unload, or a failure worth listing) is complete.

Loads are make-before-break.  A load polls the model, builds the versions that are new or changed on
the load pool (``--model-load-thread-count``) while the versions already loaded keep serving, and only
when every one of them is READY publishes the new model in one assignment; then the versions it
replaces stop taking requests, finish the ones they have, and release their instances.  A load that
fails anywhere leaves the model exactly as it was, so a failed reload keeps the old version serving.
Versions whose configuration and files did not change are kept, not reloaded.

One load or unload runs at a time per model (a lock per name); different models load in parallel.
Requests see a published model or its predecessor, never a half-built one (they resolve in the registry).

The control mode decides who loads: NONE loads everything at start, POLL also follows the
repository (:mod:`naiad.repository.poller`), EXPLICIT loads the ``--load-model`` list at start and
then whatever the load/unload API asks.  In every mode, models matching ``--load-on-demand`` are also
loaded by the first request naming them, and unloaded again to stay under ``--model-memory-budget``
(:mod:`naiad.repository.residency` decides which; this manager does it).

Models are known by key (:func:`~naiad.repository.layout.model_key`): their name, or under
``--model-namespacing`` their name in their repository, so that each repository's model of a name loads,
polls and unloads on its own.  The repository API names models, not keys: a load or unload of a name
acts on every repository's model of that name, and an ensemble's step models are looked for in the
ensemble's repository first, else wherever the only model of that name is (Triton's rules).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from naiad.backends.runtime import Runtime
from naiad.core.errors import (
    InferenceServerError,
    InternalError,
    InvalidArgumentError,
    UnavailableError,
    status_text,
    unknown_model,
)
from naiad.repository import config as cfg
from naiad.repository import ensemble
from naiad.repository.layout import (
    ModelLocation,
    RepositoryListing,
    Root,
    check_load_name,
    check_model_name,
    describe,
    locate,
    model_key,
    names_a_key,
    namespaces_of,
    split_key,
)
from naiad.repository.loader import LoadPlan, ModelLoader, NoVersionsError, PollError
from naiad.repository.model import UNLOADED, Model, ModelState, ModelVersion
from naiad.repository.overrides import DEFAULT_VERSION, LoadRequest, parse_load_parameters
from naiad.repository.poller import Poller
from naiad.repository.registry import ModelRegistry
from naiad.repository.residency import BUDGET_EXHAUSTED, Residency, footprint, loading_message
from naiad.repository.roots import CloudRoot, open_root
from naiad.repository.routing import Mirror
from naiad.repository.sync.engine import SyncError
from naiad.scheduling.cache import ResponseCache
from naiad.scheduling.rate_limiter import RateLimiter
from naiad.scheduling.start_delay import NO_DELAY, StartDelay
from naiad.settings import ModelControlMode

log = logging.getLogger("naiad.repository")

T = TypeVar("T")

#: Triton's answer to load/unload outside EXPLICIT mode (the same text in NONE and POLL).
CONTROL_DISABLED = "explicit model load / unload is not allowed if polling is enabled"
#: How often an on-demand load that waits for room looks again while models are only busy.
_ROOM_POLL_S = 0.05
#: Models being loaded by the current task chain (a dependency cycle would deadlock on the locks).
_CHAIN: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "naiad_load_chain", default=frozenset()
)


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One row of the repository index (``version``/``state`` empty for never-loaded models)."""

    name: str
    version: str = ""
    state: str = ""
    reason: str = ""
    #: Resident bytes the version measured when it loaded, while it holds instances (Naiad extension).
    memory_bytes: int = 0
    #: Its repository under ``--model-namespacing`` (not shown: Triton's index has no such field).
    namespace: str = ""


#: How long a load that updated instances in place waits for the old version's last requests (and
#: so for the instances removed to be finalized) before it returns (see ``ModelRepository._publish``).
RETIRE_WAIT_S = 2.0


class RepositoryUnavailable(Exception):
    """A repository could not be read at all (a cloud repository that failed to sync at start)."""


def default_cache_dir() -> Path:
    return Path(tempfile.gettempdir()) / "naiad-repository-cache"


class ModelRepository:
    """The models of one server, from one or more repositories (folders, ``s3://``, ``gs://``)."""

    def __init__(
        self,
        repositories: Sequence[str | Path],
        *,
        registry: ModelRegistry,
        runtime: Runtime,
        auto_complete: bool = True,
        gpu_count: int = 0,
        load_threads: int = 4,
        mode: ModelControlMode = ModelControlMode.NONE,
        startup_models: Sequence[str] = (),
        poll_secs: float = 15,
        cache_dir: Path | None = None,
        response_cache: ResponseCache | None = None,
        rate_limiter: RateLimiter | None = None,
        start_delay: StartDelay = NO_DELAY,
        residency: Residency | None = None,
        namespacing: bool = False,
        config_name: str = "",
        load_retries: int = 0,
        gpu_limits: Mapping[int, float] | None = None,
    ) -> None:
        """``registry``: where loaded models are published (what requests resolve in); ``runtime``: the
        server's, which makes the backends; ``response_cache``: the server's (``--cache-config``), for
        ensembles' steps; ``rate_limiter``: the server's (``--rate-limit``), handed to every version's
        scheduler; ``start_delay``: Triton's scheduler start delays, from the server's environment
        (:mod:`naiad.scheduling.start_delay`), for every version's scheduler; ``residency``: which
        models load on demand and the memory budget (none: neither);
        ``namespacing``: ``--model-namespacing`` (each repository a namespace); ``config_name``,
        ``load_retries``, ``gpu_limits``: ``--model-config-name``, ``--model-load-retry-count``,
        ``--model-load-gpu-limit`` (see :class:`ModelLoader`)."""
        self.roots = [open_root(str(r), cache_dir or default_cache_dir()) for r in repositories]
        self.response_cache = response_cache
        self.mode = mode
        self.startup_models = list(startup_models)
        self.poll_secs = poll_secs
        self.namespacing = namespacing
        self.runtime = runtime
        self._loader = ModelLoader(
            runtime,
            auto_complete=auto_complete,
            gpu_count=gpu_count,
            rate_limiter=rate_limiter,
            start_delay=start_delay,
            config_name=config_name,
            gpu_limits=gpu_limits,
        )
        self._load_retries = load_retries
        self.registry = registry
        #: What is published, read-only: changes go through ``registry.publish`` and ``retire``.
        self._models = registry.models()
        self._locks: dict[str, asyncio.Lock] = {}
        self._polling: set[str] = set()
        self._loading: dict[str, set[int]] = {}
        self._refresh_lock = asyncio.Lock()
        self._listing = RepositoryListing()
        self._pool = ThreadPoolExecutor(max_workers=max(1, load_threads), thread_name_prefix="naiad-load")
        self._poller: Poller | None = None
        self.residency = residency or Residency()
        #: Models under a load that pins them (not on demand): strict readiness waits for these.
        self._pinning: set[str] = set()
        #: On-demand loads in progress: every request for the model waits for the same one.
        self._demands: dict[str, asyncio.Task[None]] = {}
        #: Requests waiting for an on-demand load, by model: the model is not evicted until they have
        #: resumed (a load's end wakes its waiters a few loop turns after it wakes an eviction loop).
        self._waiters: Counter[str] = Counter()
        #: A later eviction pass, armed when a load left the server over its budget with nothing
        #: evictable yet (see ``_fit``), and the pass running.
        self._refit: asyncio.TimerHandle | None = None
        self._refits: set[asyncio.Task[None]] = set()
        #: Versions whose instances were updated in place, unloading in the background (``_publish``).
        self._retiring: set[asyncio.Task[None]] = set()

    # ---- what the repositories hold ---------------------------------------------------------------

    def index(self, ready_only: bool = False) -> list[IndexEntry]:
        """Every model in the repositories or ever loaded: one entry per known version.

        Models never loaded are listed by name only; a model that failed before its versions were
        known has one entry without a version.
        """
        scanned = set(self._scan())
        keys = scanned | set(self._models) | set(self._loading)
        entries: list[IndexEntry] = []
        for key in sorted(keys):
            name, namespace = split_key(key)
            model = self._models.get(key)
            if model is not None and model.removed and key not in scanned and key not in self._loading:
                continue
            rows: dict[int, tuple[str, str, int]] = {}
            if model is not None:
                rows = {
                    v: (mv.state.value, mv.reason, mv.memory_bytes if mv.scheduler is not None else 0)
                    for v, mv in model.versions.items()
                }
            for number in self._loading.get(key, ()):
                if rows.get(number, ("",))[0] != ModelState.READY.value:
                    rows[number] = (ModelState.LOADING.value, "", 0)
            for number in sorted(rows):
                state, reason, memory = rows[number]
                if not ready_only or state == ModelState.READY.value:
                    entries.append(IndexEntry(name, str(number), state, reason, memory, namespace))
            if rows or ready_only:
                continue
            if model is not None and model.reason:
                entries.append(IndexEntry(name, "", ModelState.UNAVAILABLE.value, model.reason, 0, namespace))
            else:
                entries.append(IndexEntry(name, namespace=namespace))
        return entries

    def all_ready(self) -> bool:
        """Triton's strict readiness: nothing loading that does not serve yet, and every known
        version READY or unloaded on purpose.  Models never loaded do not count.

        A model that already serves a READY version keeps the server ready while other versions of
        it load or fail to load in place, as Triton's (whose strict readiness looks at READY versions
        only): an in-place rollout, or one rolled back after a failed load, must not take every pod out
        of its Service's endpoints at once while the old version still answers.

        Models the server loads and evicts by itself (matching ``--load-on-demand``, and neither pinned
        by a load at start or through the API nor under such a load) do not count either: a request
        for one loads it, so the server serves it whatever its state, and an on-demand load, an
        eviction or a failed on-demand load must not take the pod out of its Service's endpoints."""
        elastic = self._elastic
        for name in self._polling:
            model = self._models.get(name)
            if (model is None or not model.ready_versions()) and not elastic(name):
                return False
        for name, numbers in self._loading.items():
            model = self._models.get(name)
            if (model is not None and model.ready_versions()) or elastic(name):
                continue
            for number in numbers:
                mv = model.versions.get(number) if model is not None else None
                if mv is None or mv.state is not ModelState.READY:
                    return False
        for name, model in self._models.items():
            if elastic(name):
                continue
            if not model.versions and model.reason:
                return False
            if model.ready_versions():
                continue
            if not all(mv.counts_as_ready for mv in model.versions.values()):
                return False
        return True

    def _elastic(self, name: str) -> bool:
        """Whether ``name`` is loaded and evicted by the server itself (see :meth:`all_ready`)."""
        residency = self.residency
        return (
            residency.enabled
            and residency.on_demand(name)
            and name not in residency.pinned
            and name not in self._pinning
        )

    # ---- control mode -------------------------------------------------------------------------

    async def start(self) -> bool:
        """Load what the control mode loads at start; in POLL mode, start following the repository.
        Whether every one of those loads succeeded (Triton's server exits when one did not, unless
        ``--exit-on-error=false``).

        Raises :class:`RepositoryUnavailable` if a cloud repository cannot be synced.
        """
        try:
            locations = await self.refresh()
        except SyncError as exc:
            raise RepositoryUnavailable(f"failed to read the model repository: {exc.message}") from exc
        if self.mode is ModelControlMode.EXPLICIT:
            if "*" in self.startup_models:
                names = sorted(locations)
            else:
                names = [key for name in self.startup_models for key in self._keys(name)]
        else:
            names = sorted(locations)
        if self.mode is ModelControlMode.POLL:
            self._poller = Poller(self, self.poll_secs)
            await self._poller.prime(locations)
        loaded = await asyncio.gather(*(self.try_load(name, record_missing=True) for name in names))
        if self._poller is not None:
            self._poller.start()
        return all(loaded)

    async def load_model(self, name: str, parameters: Mapping[str, object]) -> None:
        """The repository API's load (EXPLICIT mode only); ``parameters`` as :mod:`overrides` says."""
        if self.mode is not ModelControlMode.EXPLICIT:
            raise UnavailableError(CONTROL_DISABLED)
        check_load_name(name)
        request = parse_load_parameters(parameters)
        keys = [name]
        if self.namespacing and not request.files:  # (files: a model given whole, in no repository)
            await self._sync()
            keys = self._keys(name)
        for key in keys:
            await self._make_room(key, on_demand=False)
            try:
                await self.load(key, request, fresh=keys == [name])
            finally:
                self.residency.release(key)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """The repository API's unload (EXPLICIT mode only); unloading an unknown model succeeds."""
        if self.mode is not ModelControlMode.EXPLICIT:
            raise UnavailableError(CONTROL_DISABLED)
        if names_a_key(name):  # no model is called that: nothing to unload, as for any unknown name
            return
        keys = [model.key for model in self.registry.named(name)] or [name]
        for key in keys:
            await self.unload(key, unload_dependents)
            self.residency.unloaded(key)

    async def refresh(self) -> dict[str, ModelLocation]:
        """Sync cloud repositories (one refresh at a time), then scan every repository."""
        await self._sync()
        return self._scan()

    async def _sync(self) -> None:
        """Bring cloud repositories up to date (local folders need nothing)."""
        async with self._refresh_lock:
            if any(isinstance(root, CloudRoot) for root in self.roots):
                in_use = {
                    mv.model_dir
                    for model in self._models.values()
                    for mv in model.serving()
                    if mv.model_dir is not None
                }
                for root in self.roots:
                    await asyncio.to_thread(root.refresh, in_use)

    def synced_folders(self) -> tuple[Path, ...]:
        """The current snapshots of the cloud repositories: complete copies, never half-written."""
        return tuple(
            path for root in self.roots if isinstance(root, CloudRoot) and (path := root.path()) is not None
        )

    def _scan(self) -> dict[str, ModelLocation]:
        return self._listing.scan(self._roots())

    def _locate(self, key: str) -> ModelLocation | None:
        return locate(self._roots(), key)

    def _roots(self) -> list[Root]:
        """The repositories' folders; each its own namespace (its ``--model-repository``) under
        namespacing."""
        namespaced = self.namespacing
        paths = [(root.spec, root.path()) for root in self.roots]
        return [Root(path, spec if namespaced else "") for spec, path in paths if path is not None]

    def _keys(self, name: str) -> list[str]:
        """The models a load naming ``name`` loads: itself, or under namespacing every repository's
        model of that name (``[name]`` when none has one: it then fails as a model found nowhere)."""
        if not self.namespacing:
            return [name]
        return namespaces_of(self._roots(), name) or [name]

    def _dependency(self, namespace: str, name: str) -> str:
        """The key of the step model ``name`` of an ensemble in ``namespace``: the one in the same
        repository, else the only model of that name anywhere (Triton's rule), else the same
        repository's (whose load then fails: the model is missing or ambiguous)."""
        if not namespace:
            return name
        preferred = model_key(name, namespace)
        if preferred in self._models or self._locate(preferred) is not None:
            return preferred
        found = {model.key for model in self.registry.named(name)}
        found.update(namespaces_of(self._roots(), name))
        return found.pop() if len(found) == 1 else preferred

    # ---- loading ------------------------------------------------------------------------------

    async def try_load(self, name: str, *, record_missing: bool = False) -> bool:
        """Load for the server itself (start, POLL): failures are logged and left in the index."""
        try:
            await self.load(name, record_missing=record_missing)
        except InferenceServerError as exc:
            log.error("%s", exc.message.rstrip())
            return False
        return True

    async def load(
        self,
        name: str,
        request: LoadRequest | None = None,
        *,
        fresh: bool = False,
        record_missing: bool = False,
        on_demand: bool = False,
    ) -> Model:
        """Load or reload ``name``; raise Triton's error for the client if it did not load.

        ``fresh`` syncs cloud repositories first; ``record_missing`` lists a model that is in no
        repository as UNAVAILABLE (for ``--load-model`` names) instead of only failing;
        ``on_demand``: a request's load, which leaves the model evictable (any other load pins it).
        """
        chain = _CHAIN.get()
        if name in chain:
            shown = split_key(name)[0]
            raise InvalidArgumentError(
                f"load failed for model '{shown}': circular dependency through '{shown}'\n"
            )
        token = _CHAIN.set(chain | {name})
        try:
            async with self._lock(name):
                if not on_demand:
                    self._pinning.add(name)
                started = self.residency.clock()
                try:
                    model = await self._load(name, request, fresh, record_missing)
                finally:
                    self._pinning.discard(name)
                self.residency.loaded(name, model, on_demand, self.residency.clock() - started)
        finally:
            _CHAIN.reset(token)
        await self._fit(name)
        return model

    # ---- on demand and the memory budget --------------------------------------------------------

    async def demand(self, name: str) -> None:
        """Load ``name`` for a request naming it (a ``--load-on-demand`` model that does not serve).

        Concurrent requests share one load; each waits at most ``--on-demand-load-timeout-secs``
        (then UNAVAILABLE, while the load carries on for the requests after it).  A name that is in
        no repository is an unknown model, as for any request.
        """
        residency = self.residency
        task = self._demands.get(name)
        if task is None:
            if names_a_key(name) or self._locate(name) is None:
                raise unknown_model(name)
            task = asyncio.get_running_loop().create_task(self._load_on_demand(name))
            self._demands[name] = task
            task.add_done_callback(lambda done: self._demanded(name, done))
        started, loaded = residency.clock(), False
        self._waiters[name] += 1
        try:
            # ``asyncio.wait``, not ``wait_for``: a frontend worker's request runs outside any task
            # (``naiad.engine.link``), where Python 3.12's ``wait_for`` raises "Timeout should be used
            # inside a task"; the load is not cancelled when this request stops waiting for it
            done, _ = await asyncio.wait((task,), timeout=residency.load_timeout)
            if not done:
                raise UnavailableError(loading_message(name))
            task.result()
            loaded = True
        finally:
            self._waiters[name] -= 1
            if not self._waiters[name]:
                del self._waiters[name]
            residency.waited(name, residency.clock() - started, loaded)

    def _demanded(self, name: str, task: asyncio.Task[None]) -> None:
        if self._demands.get(name) is task:
            del self._demands[name]
        if not task.cancelled():
            task.exception()  # retrieved: the requests that waited for it got it (or timed out)

    async def _load_on_demand(self, name: str) -> None:
        await self._make_room(name, on_demand=True)
        try:
            await self.load(name, on_demand=True)
        finally:
            self.residency.release(name)

    async def _make_room(self, name: str, *, on_demand: bool) -> None:
        """Find room for loading ``name`` (see :meth:`_find_room`), then reserve its expected
        footprint until the load completes (the caller releases it if the load fails): the loads
        that look for room meanwhile count it, so that two loads checked side by side cannot both
        pass the budget (one short run ended 5% over it before this)."""
        if self.residency.limited:
            await self._find_room(name, on_demand=on_demand)
            self.residency.reserve(name)

    async def _find_room(self, name: str, *, on_demand: bool) -> None:
        """Evict until loading ``name`` (its expected footprint) fits the budgets.  An explicit load
        proceeds anyway (the operator's or user's decision).  An on-demand load waits, up to
        ``--on-demand-load-timeout-secs``, for models inside their minimum residency, with requests
        in flight, or being loaded beside it to become evictable (under churn every loaded model can
        be young: failing then would turn the residency meant to stop thrashing into failed
        requests), and fails when waiting cannot make room in time."""
        residency = self.residency
        if residency.fits(self._models, name):
            return
        deadline = residency.clock() + residency.load_timeout
        while True:
            for victim in residency.victims(self._models, self._busy(name)):
                await self._evict(victim)
                if residency.fits(self._models, name):
                    return
            if not on_demand:
                return
            busy = self._busy(name)
            wait = residency.evictable_in(self._models, busy)
            if wait is None and busy - {name}:  # loads and unloads under way change what is held
                wait = _ROOM_POLL_S
            if wait is None or residency.clock() + wait > deadline:
                raise UnavailableError(BUDGET_EXHAUSTED)
            await asyncio.sleep(max(wait, _ROOM_POLL_S))
            if residency.fits(self._models, name):  # an unload made room meanwhile
                return

    async def _fit(self, name: str) -> None:
        """After a load: evict until what is loaded fits the budgets again (the load's footprint may
        have been more than expected, or loads ran side by side), never ``name`` itself."""
        residency = self.residency
        if not residency.limited or not residency.over(self._models):
            return
        for victim in residency.victims(self._models, self._busy(name)):
            await self._evict(victim)
            if not residency.over(self._models):
                return
        self._fit_later()

    def _fit_later(self) -> None:
        """Still over the budget, every other model young, busy or pinned: try again once one may be
        evictable.  Without it a server stays over its budget until its next load, for good once
        requests stop (seen at the end of the density benchmark: a pod 9% over)."""
        if self._refit is not None:
            return
        wait = self.residency.evictable_in(self._models, self._busy(""))
        if wait is None:  # pinned models, or loads under way (each fits again when it ends)
            return
        loop = asyncio.get_running_loop()

        def start() -> None:
            self._refit = None
            task = loop.create_task(self._fit(""))
            self._refits.add(task)
            task.add_done_callback(self._refits.discard)

        self._refit = loop.call_later(max(wait, _ROOM_POLL_S), start)

    def _busy(self, name: str) -> set[str]:
        """Models eviction must leave alone: ``name``, whatever is being loaded or unloaded, and a model
        loaded on demand whose waiting requests have not resumed yet (from then on to their dispatch
        nothing yields, and once dispatched they count in flight): evicting it there failed a request
        that its own load had just served, "has no available versions"."""
        locked = {other for other, lock in self._locks.items() if lock.locked()}
        return {name} | locked | set(self._demands) | set(self._waiters)

    async def _evict(self, name: str) -> None:
        """Unload ``name`` to free memory, unless it was pinned or took a request since the victims
        were chosen (evictions before it awaited unloads)."""
        model = self._models.get(name)
        if model is None or name not in self.residency.victims({name: model}, self._busy("")):
            return
        log.info("evicting model '%s' (%d bytes) to stay within the memory budget", name, footprint(model))
        await self.unload(name)
        self.residency.unloaded(name, evicted=True)

    async def _load(self, key: str, request: LoadRequest | None, fresh: bool, record_missing: bool) -> Model:
        previous = self._models.get(key)
        self._polling.add(key)
        try:
            plan = await self._poll(key, request, fresh, record_missing, previous)
        finally:
            self._polling.discard(key)
        name = plan.name
        try:
            routes = _routing(name, plan, request, previous)
            await self._load_dependencies(plan)
        except InferenceServerError:
            _remove_scratch(plan.scratch)
            raise
        self._complete_ensemble(plan)
        reused = _reusable(plan, previous)
        updated = _updatable(plan, previous, reused)
        built, failed = await self._build(plan, [v for v in plan.versions if v not in reused], updated)
        if failed:
            await self._unload_versions(list(built.values()))
            _remove_scratch(plan.scratch)
            if not _serves(previous):
                self.registry.publish(_failure_record(plan, previous, failed))
            details = "".join(f"version {v} is at UNAVAILABLE state: {failed[v]};" for v in sorted(failed))
            raise InvalidArgumentError(f"load failed for model '{name}': {details}\n")
        return await self._publish(plan, previous, {**reused, **built}, routes, set(updated.values()))

    async def _build(
        self, plan: LoadPlan, numbers: list[int], updated: dict[int, ModelVersion]
    ) -> tuple[dict[int, ModelVersion], dict[int, str]]:
        """Build versions on the load pool, in parallel: those that loaded, and why the others did not
        (logged per version in Triton's words: ``loading: m:1``, ``failed to load 'm' version 1: ...``)."""
        for number in numbers:
            log.info("loading: %s:%d", plan.name, number)
        self._loading[plan.key] = set(numbers)
        try:
            outcomes = await asyncio.gather(
                *(self._build_version(plan, v, updated.get(v)) for v in numbers), return_exceptions=True
            )
        finally:
            self._loading.pop(plan.key, None)
        built: dict[int, ModelVersion] = {}
        failed: dict[int, str] = {}
        for number, outcome in zip(numbers, outcomes, strict=True):
            if isinstance(outcome, ModelVersion):
                built[number] = outcome
            else:
                failed[number] = _reason(plan.name, number, outcome)
                log.error("failed to load '%s' version %d: %s", plan.name, number, failed[number].rstrip())
        if failed:
            log.info("failed to load '%s'", plan.name)
        return built, failed

    async def _publish(
        self,
        plan: LoadPlan,
        previous: Model | None,
        versions: dict[int, ModelVersion],
        routes: _Routing,
        updated: set[ModelVersion],
    ) -> Model:
        """Swap the new model in, then retire the versions it replaces (after their requests).

        Versions whose instances were ``updated`` in place retire as their last requests end, the
        instances removed finalized then: the load waits for that up to ``RETIRE_WAIT_S``, and
        leaves the rest to the background, since a long request on an instance kept must not hold
        the update (Triton's rule; the old version's requests are not told apart by instance)."""
        replaced = (
            [] if previous is None else [mv for mv in previous.serving() if mv not in versions.values()]
        )
        for number, mv in previous.versions.items() if previous is not None else ():
            versions.setdefault(number, mv)  # dropped versions stay listed: UNLOADING, then unloaded
        for mv in replaced:
            mv.stop()
        model = Model(
            plan.name,
            plan.path,
            plan.config,
            plan.signature,
            dict(sorted(versions.items())),
            config_json=plan.config_json,
            default_version=routes.default_version,
            dependencies=plan.dependencies,
            source_fingerprint=plan.source_fingerprint,
            version_weights=routes.version_weights,
            mirror=routes.mirror,
            namespace=plan.namespace,
        )
        self.registry.publish(model)
        log.info("successfully loaded '%s' version(s) %s", plan.name, ", ".join(map(str, plan.versions)))
        if plan.scratch not in {mv.scratch for mv in model.serving()}:
            _remove_scratch(plan.scratch)
        retiring = [mv for mv in replaced if mv in updated]
        if retiring:
            task = asyncio.create_task(self._unload_versions(retiring))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
            await asyncio.wait({task}, timeout=RETIRE_WAIT_S)
        await self._unload_versions([mv for mv in replaced if mv not in retiring])
        return model

    async def _poll(
        self,
        key: str,
        request: LoadRequest | None,
        fresh: bool,
        record_missing: bool,
        previous: Model | None,
    ) -> LoadPlan:
        """Poll the model; on failure record it (unless an older load still serves) and raise."""
        location: ModelLocation | None = None
        name, namespace = split_key(key)
        try:
            check_model_name(name)
            if request is None or not request.files:
                if fresh:
                    await self._sync()
                location = self._locate(key)
            return await self._run(self._loader.poll, name, location, request)
        except (PollError, InvalidArgumentError, SyncError) as exc:
            message = exc.message
            log.error("Poll failed for model directory '%s': %s", name, message)  # (Triton's words)
            if isinstance(exc, NoVersionsError):
                if not _serves(previous) and location is not None:
                    self.registry.publish(Model(name, location.path, reason=message, namespace=namespace))
                raise InvalidArgumentError(f"load failed for model '{name}': {message}\n") from None
            if not _serves(previous) and (location is not None or record_missing):
                path = location.path if location is not None else Path(name)
                self.registry.publish(Model(name, path, reason=message, namespace=namespace))
            raise InternalError(f"failed to load '{name}', failed to poll from model repository") from None

    async def _load_dependencies(self, plan: LoadPlan) -> None:
        """Load the models ``plan``'s model needs that are not serving yet; its dependencies are
        their keys from now on (namespacing chooses which repository's each is)."""
        plan.dependencies = tuple(self._dependency(plan.namespace, name) for name in plan.dependencies)
        closing = self._cycle_back_to(plan.key, plan.dependencies)
        if closing is not None:  # (loaded side by side, the two loads would wait for each other)
            start = split_key(plan.key)[0]
            raise InvalidArgumentError(
                f"circular dependency between ensembles: {start} -> ... -> {split_key(closing)[0]} -> {start}"
            )
        for dependency in plan.dependencies:
            current = self._models.get(dependency)
            if current is not None and current.ready_versions():
                continue
            try:
                await self.load(dependency)
            except InferenceServerError as exc:
                self._record_dependency_failure(plan, dependency, exc.message)
                shown = split_key(dependency)[0]
                raise InvalidArgumentError(
                    f"load failed for model '{plan.name}': failed to load '{shown}': {exc.message.rstrip()}\n"
                ) from None

    def _cycle_back_to(self, start: str, dependencies: tuple[str, ...]) -> str | None:
        """The model whose steps lead back to ``start`` through ensembles, read from their configs
        (a loaded model's from what it loaded with), or ``None``: Triton's circular dependency check."""
        seen: set[str] = set()
        pending = list(dependencies)
        while pending:
            key = pending.pop()
            if key in seen:
                continue
            seen.add(key)
            for step in self._steps_of(key):
                if step == start:
                    return key
                pending.append(step)
        return None

    def _steps_of(self, key: str) -> tuple[str, ...]:
        """The step models of ``key`` when it is an ensemble (none for other models or unreadable configs)."""
        model = self._models.get(key)
        if model is not None:
            return model.dependencies
        location = self._locate(key)
        if location is None:
            return ()
        try:
            config = cfg.read_config(location.path, self._loader.config_name)
        except InferenceServerError:
            return ()
        return tuple(self._dependency(location.namespace, name) for name in cfg.dependencies(config))

    # ---- unloading ----------------------------------------------------------------------------

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """Unload every version; with ``unload_dependents`` also the models it needs (loaded along
        with it) that no other loaded model needs."""
        async with self._lock(name):
            model = self._models.get(name)
            if model is None:
                return
            if not model.versions:
                self.registry.retire(name)
                return
            for mv in model.versions.values():
                if mv.state is ModelState.UNAVAILABLE:
                    mv.reason = UNLOADED  # a failed version no longer holds readiness down
            model.default_version = None
            model.version_weights = None
            model.mirror = None
            dependents = model.dependencies
            serving = model.serving()
            for mv in serving:
                mv.stop()
            await self._unload_versions(serving)
            for mv in serving:
                log.info("successfully unloaded '%s' version %d", describe(name), mv.version)
        if unload_dependents:
            for dependent in dependents:
                needed = any(
                    dependent in other.dependencies
                    for other in self._models.values()
                    if other.ready_versions()
                )
                if not needed:
                    await self.unload(dependent, True)

    async def forget(self, name: str) -> None:
        """Unload ``name`` and drop it from the index (POLL: its folder was removed).  Its record
        stays, as Triton keeps it: a request for it is told the model "has no available versions"
        (404; a request naming a version, that the version "is not at ready state", 503), not that
        it is not found.  Under namespacing it goes: a model of its name in another repository then
        answers for the name."""
        await self.unload(name)
        self.residency.unloaded(name)
        async with self._lock(name):
            model = self._models.get(name)
            if model is not None and model.versions and not model.namespace and not model.serving():
                model.removed = True
            else:
                self.registry.retire(name)

    async def _unload_versions(self, versions: list[ModelVersion]) -> None:
        await asyncio.gather(*(mv.unload() for mv in versions))
        live = {mv.scratch for model in self._models.values() for mv in model.serving()}
        for scratch in {mv.scratch for mv in versions} - live:
            _remove_scratch(scratch)

    async def close(self) -> None:
        if self._refit is not None:
            self._refit.cancel()
            self._refit = None
        for task in list(self._refits):
            task.cancel()
        if self._poller is not None:
            await self._poller.stop()
        for name in list(self._models):
            await self.unload(name)
        await asyncio.gather(*self._retiring)
        self._pool.shutdown(wait=False)

    # ---- helpers ------------------------------------------------------------------------------

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # ---- ensemble hooks (naiad.repository.ensemble) -------------------------------------------

    def _complete_ensemble(self, plan: LoadPlan) -> None:
        """An ensemble's configuration says it is decoupled once its step models are known."""
        if ensemble.is_ensemble(plan.config):
            ensemble.complete_config(plan, self.registry.scope(plan.namespace))

    async def _build_version(
        self, plan: LoadPlan, number: int, previous: ModelVersion | None
    ) -> ModelVersion:
        """Ensembles hold no instances: their version is checked and built here, on the loop, against
        the step models loaded just before; every other model builds on the load pool, tried again
        ``--model-load-retry-count`` times after a failure (each failure logged as Triton logs it)."""
        if ensemble.is_ensemble(plan.config):
            route = self.registry.route
            if plan.namespace:
                route = functools.partial(route, namespace=plan.namespace)
            models = self.registry.scope(plan.namespace)
            return ensemble.build_version(plan, number, models, route, self.response_cache)
        for _ in range(self._load_retries):  # --model-load-retry-count: again at once, as Triton
            try:
                return await self._run(self._loader.build_version, plan, number, previous)
            except Exception as exc:
                reason = _reason(plan.name, number, exc)
                log.error("failed to load '%s' version %d: %s", plan.name, number, reason)
        return await self._run(self._loader.build_version, plan, number, previous)

    def _record_dependency_failure(self, plan: LoadPlan, dependency: str, message: str) -> None:
        """An ensemble whose step model failed to load is listed UNAVAILABLE with the reason."""
        if ensemble.is_ensemble(plan.config) and not _serves(self._models.get(plan.key)):
            found = dependency in self._models or self._locate(dependency) is not None
            shown = split_key(dependency)[0]
            reason = ensemble.dependency_failure(plan.name, shown, message if found else None)
            log.error("failed to load '%s': %s", plan.name, reason)  # (Triton's node status line)
            failed = dict.fromkeys(plan.versions, reason)
            self.registry.publish(_failure_record(plan, self._models.get(plan.key), failed))


def _serves(model: Model | None) -> bool:
    return model is not None and bool(model.ready_versions())


def _reusable(plan: LoadPlan, previous: Model | None) -> dict[int, ModelVersion]:
    """Loaded versions that the new load would build identically (same configuration and files)."""
    if previous is None:
        return {}
    reused: dict[int, ModelVersion] = {}
    for number in plan.versions:
        old = previous.versions.get(number)
        if old is not None and old.state is ModelState.READY and old.fingerprint == plan.fingerprints[number]:
            reused[number] = old
    return reused


def _updatable(
    plan: LoadPlan, previous: Model | None, reused: dict[int, ModelVersion]
) -> dict[int, ModelVersion]:
    """Loaded versions whose instances the new load updates in place (Triton's instance update):
    READY, the same files and the same configuration but for the instance groups.  (A sequence
    still open then must start again, as after a full reload: the new scheduler does not know it,
    where Triton keeps it on its instance until it ends.)"""
    if previous is None or plan.config.platform == "ensemble":
        return {}
    updated: dict[int, ModelVersion] = {}
    for number in plan.versions:
        old = previous.versions.get(number)
        if (
            number not in reused
            and old is not None
            and old.state is ModelState.READY
            and old.workers
            and old.base_fingerprint
            and old.base_fingerprint == plan.base_fingerprints.get(number)
        ):
            updated[number] = old
    return updated


def _failure_record(plan: LoadPlan, previous: Model | None, failed: dict[int, str]) -> Model:
    """What the index shows after a load that failed with nothing older serving: every version of
    the attempt UNAVAILABLE (with its reason, or "unloaded" for those that had loaded), next to the
    rows of earlier loads."""
    record = Model(plan.name, plan.path, plan.config, plan.signature, config_json=plan.config_json)
    record.namespace = plan.namespace
    if previous is not None:
        record.versions = {v: mv for v, mv in previous.versions.items() if mv.scheduler is None}
    for number in plan.versions:
        reason = failed.get(number, UNLOADED)
        record.versions[number] = ModelVersion(number, ModelState.UNAVAILABLE, reason, model_name=plan.name)
    record.versions = dict(sorted(record.versions.items()))
    record.source_fingerprint = plan.source_fingerprint
    record.dependencies = plan.dependencies
    return record


@dataclass(frozen=True, slots=True)
class _Routing:
    """How requests naming no version are served after a load (see :mod:`naiad.repository.routing`)."""

    default_version: int | None
    version_weights: dict[int, int] | None
    mirror: Mirror | None


def _routing(name: str, plan: LoadPlan, request: LoadRequest | None, previous: Model | None) -> _Routing:
    """The pinned default version, version weights and mirror after this load: the request's, else the
    previous ones while every version they name is still loaded.  A request naming a version this load
    does not load is INVALID_ARG (and the load changes nothing)."""
    if request is not None:
        for parameter, numbers in request.named_versions().items():
            missing = sorted(numbers - set(plan.versions))
            if missing:
                what = "default version" if parameter == DEFAULT_VERSION else f"'{parameter}' version"
                raise InvalidArgumentError(
                    f"load failed for model '{name}': {what} {missing[0]} is not among the versions "
                    f"to load {plan.versions}\n"
                )
    loaded = set(plan.versions)
    if request is not None and request.sets_default_version:
        pinned = request.default_version
    else:
        pinned = previous.default_version if previous is not None else None
        pinned = pinned if pinned in loaded else None
    if request is not None and request.sets_version_weights:
        weights = request.version_weights
    else:
        weights = previous.version_weights if previous is not None else None
        weights = weights if weights is not None and set(weights) <= loaded else None
    if request is not None and request.sets_mirror:
        mirror = request.mirror
    else:
        mirror = previous.mirror if previous is not None else None
        mirror = mirror if mirror is not None and mirror.version in loaded else None
    return _Routing(pinned, weights, mirror)


def _reason(name: str, version: int, error: BaseException) -> str:
    """Why a version failed to load, as Triton words it: its status code's name, then the message
    ("Invalid argument: unable to find backend library ..."), in the log, the index and the answer
    to a load request."""
    if isinstance(error, InferenceServerError):
        return status_text(error)
    log.error("loading model '%s' version %d failed", name, version, exc_info=error)
    return f"{type(error).__name__}: {error}"


def _remove_scratch(scratch: Path | None) -> None:
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
