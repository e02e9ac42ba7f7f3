"""Loads models from the repositories and answers "which version serves this request".

Loading is blocking work (parsing, reading model files, framework sessions), so it runs on a small
thread pool (``--model-load-thread-count``) while the event loop keeps serving.  A model that fails
at any step is kept with state UNAVAILABLE and the reason, so the index and the error messages can
say what went wrong, and every other model still loads.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from naiad.backends.base import InstanceContext
from naiad.backends.registry import get_backend
from naiad.core.errors import (
    InferenceServerError,
    NotFoundError,
    UnavailableError,
    unknown_model,
)
from naiad.repository import config as cfg
from naiad.repository.layout import ModelLocation, available_versions, scan_repositories
from naiad.repository.model import Model, ModelState, ModelVersion
from naiad.scheduling.factory import create_scheduler
from naiad.scheduling.scheduler import Scheduler
from naiad.scheduling.worker import InstanceWorker

log = logging.getLogger("naiad.repository")

_KIND_NAMES = {
    mc.ModelInstanceGroup.KIND_CPU: "CPU",
    mc.ModelInstanceGroup.KIND_GPU: "GPU",
    mc.ModelInstanceGroup.KIND_MODEL: "MODEL",
}


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One row of the repository index (``version``/``state`` empty for never-loaded models)."""

    name: str
    version: str = ""
    state: str = ""
    reason: str = ""


class ModelRepository:
    """The models of one server, from one or more repository folders."""

    def __init__(
        self,
        roots: list[Path],
        *,
        auto_complete: bool = True,
        gpu_count: int = 0,
        load_threads: int = 4,
    ) -> None:
        self.roots = roots
        self.auto_complete = auto_complete
        self.gpu_count = gpu_count
        self._models: dict[str, Model] = {}
        self._pool = ThreadPoolExecutor(max_workers=max(1, load_threads), thread_name_prefix="naiad-load")

    # ---- lookup -------------------------------------------------------------------------------

    def models(self) -> dict[str, Model]:
        return self._models

    def get_model(self, name: str) -> Model:
        model = self._models.get(name)
        if model is None:
            raise unknown_model(name)
        return model

    def resolve(self, name: str, version: str) -> tuple[Model, ModelVersion]:
        """The model and the version that serves a request for ``version`` ("" = latest ready)."""
        model = self.get_model(name)
        if not version:
            ready = model.ready_versions()
            if not ready:
                raise UnavailableError(f"Request for unknown model: '{name}' has no available versions")
            return model, model.versions[ready[-1]]
        number = int(version) if version.isdigit() else -1
        model_version = model.versions.get(number)
        if model_version is None:
            raise NotFoundError(f"Request for unknown model: '{name}' version {version} is not found")
        if model_version.state is not ModelState.READY:
            raise UnavailableError(
                f"Request for unknown model: '{name}' version {version} is not at ready state"
            )
        return model, model_version

    def index(self, ready_only: bool = False) -> list[IndexEntry]:
        """Every model in the repositories, loaded or not, one entry per known version."""
        names = set(scan_repositories(self.roots)) | set(self._models)
        entries: list[IndexEntry] = []
        for name in sorted(names):
            model = self._models.get(name)
            if model is None:
                if not ready_only:
                    entries.append(IndexEntry(name))
                continue
            if not model.versions:
                if not ready_only:
                    entries.append(IndexEntry(name, "", model.state.value, model.reason))
                continue
            for number in sorted(model.versions):
                mv = model.versions[number]
                if ready_only and mv.state is not ModelState.READY:
                    continue
                entries.append(IndexEntry(name, str(number), mv.state.value, mv.reason))
        return entries

    def all_ready(self) -> bool:
        """Strict readiness: every model that should be loaded has all its versions READY."""
        return all(
            model.versions and all(mv.state is ModelState.READY for mv in model.versions.values())
            for model in self._models.values()
        )

    # ---- loading ------------------------------------------------------------------------------

    async def load_all(self) -> None:
        """Load every model in the repositories (model control mode NONE)."""
        locations = scan_repositories(self.roots)
        await asyncio.gather(*(self.load(location) for location in locations.values()))

    async def load(self, location: ModelLocation) -> Model:
        """Load (or reload) one model; never raises for a bad model: it becomes UNAVAILABLE."""
        model = Model(location.name, location.path)
        previous = self._models.get(location.name)
        if previous is None:
            self._models[location.name] = model
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._pool, self._load_blocking, location, model)
        self._models[location.name] = model
        if previous is not None and previous is not model:
            await loop.run_in_executor(self._pool, _close_model, previous)
        state = model.state.value
        log.info("model '%s' %s%s", model.name, state, f": {model.reason}" if model.reason else "")
        return model

    async def unload(self, name: str) -> None:
        model = self._models.pop(name, None)
        if model is not None:
            for mv in model.versions.values():
                mv.state = ModelState.UNLOADING
            await asyncio.get_running_loop().run_in_executor(self._pool, _close_model, model)

    async def close(self) -> None:
        for name in list(self._models):
            await self.unload(name)
        self._pool.shutdown(wait=False)

    def _load_blocking(self, location: ModelLocation, model: Model) -> None:
        try:
            if location.duplicates:
                others = ", ".join(str(p) for p in location.duplicates)
                raise UnavailableError(
                    f"model '{location.name}' appears in more than one repository: {location.path}, {others}"
                )
            config = cfg.read_config(location.path)
            versions = available_versions(location.path)
            if not config.name:
                config.name = location.name
            cfg.resolve_backend(config, location.path, versions)
            backend = get_backend(config.backend) if config.platform != "ensemble" else None
            if backend is not None and self.auto_complete:
                latest = location.path / str(versions[-1]) if versions else None
                backend.auto_complete(config, location.path, latest)
            cfg.normalize(config, location.name, self.gpu_count)
            model.config = config
            model.signature = cfg.signature_of(config)
            model.config_json = cfg.to_json(config)
            selected = cfg.selected_versions(config, versions)
            if not selected:
                raise UnavailableError(
                    f"at least one version must be available under the version policy of model "
                    f"'{location.name}'"
                )
        except InferenceServerError as exc:
            model.reason = exc.message
            return
        except Exception as exc:  # a bug in a backend's auto-complete must not stop the server
            log.exception("loading model '%s' failed", location.name)
            model.reason = f"{type(exc).__name__}: {exc}"
            return
        for number in selected:
            model.versions[number] = ModelVersion(number)
        for number in selected:
            mv = model.versions[number]
            try:
                mv.scheduler = self._create_scheduler(model, number)
                mv.state = ModelState.READY
            except InferenceServerError as exc:
                mv.state, mv.reason = ModelState.UNAVAILABLE, exc.message
            except Exception as exc:
                log.exception("loading model '%s' version %d failed", model.name, number)
                mv.state, mv.reason = ModelState.UNAVAILABLE, f"{type(exc).__name__}: {exc}"

    def _create_scheduler(self, model: Model, version: int) -> Scheduler:
        config = model.config
        assert model.signature is not None
        backend = get_backend(config.backend)
        version_dir = model.path / str(version)
        workers: list[InstanceWorker] = []
        try:
            for group in config.instance_group:
                kind = _KIND_NAMES.get(group.kind, "CPU")
                devices = list(group.gpus) if kind == "GPU" else [0]
                for device in devices:
                    for _ in range(group.count):
                        name = f"{group.name}_{len(workers)}"
                        context = InstanceContext(
                            model_name=model.name,
                            model_version=version,
                            model_dir=model.path,
                            version_dir=version_dir,
                            model_file=version_dir / config.default_model_filename,
                            config=config,
                            signature=model.signature,
                            instance_name=name,
                            kind=kind,
                            device_id=device,
                        )
                        workers.append(InstanceWorker(backend.create_instance(context), name))
        except BaseException:
            for worker in workers:
                worker.close()
            raise
        return create_scheduler(config, workers)


def _close_model(model: Model) -> None:
    for mv in model.versions.values():
        if mv.scheduler is not None:
            mv.scheduler.close()
            mv.scheduler = None
