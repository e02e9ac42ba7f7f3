"""The blocking half of a load, run on the load pool: read and complete the config, then build versions.

Triton splits a load into *polling* the model (find it, read or override its configuration,
auto-complete and validate it, pick the versions) and *loading* each version (create its instances,
warm them up).  The split matters to clients: a poll failure is reported as
``failed to load '<m>', failed to poll from model repository`` (INTERNAL), a version failure as
``load failed for model '<m>': version N is at UNAVAILABLE state: <reason>;`` (INVALID_ARG).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from naiad.backends import registry
from naiad.backends.base import Backend, InstanceContext, InstanceHealth
from naiad.backends.runtime import PYTHON_RUNTIME, Runtime
from naiad.core.errors import (
    InferenceServerError,
    InternalError,
    InvalidArgumentError,
    UnavailableError,
    status_text,
)
from naiad.core.signature import ModelSignature
from naiad.repository import config as cfg
from naiad.repository.fingerprint import folder_fingerprint, version_fingerprints
from naiad.repository.footprint import GpuMemory, OverlappingLoads, gpu_growth, resident_bytes, version_bytes
from naiad.repository.layout import ModelLocation, available_versions, model_key
from naiad.repository.model import ModelState, ModelVersion
from naiad.repository.overrides import LoadRequest, OverrideError, write_model_files
from naiad.repository.readiness import readiness_of
from naiad.repository.warmup import run_warmup, warmup_samples
from naiad.scheduling.factory import create_scheduler
from naiad.scheduling.rate_limiter import RateLimiter
from naiad.scheduling.start_delay import NO_DELAY, StartDelay
from naiad.scheduling.worker import InstanceWorker

log = logging.getLogger("naiad.repository")

_KIND_NAMES = {
    mc.ModelInstanceGroup.KIND_CPU: "CPU",
    mc.ModelInstanceGroup.KIND_GPU: "GPU",
    mc.ModelInstanceGroup.KIND_MODEL: "MODEL",
}


class PollError(Exception):
    """The model could not be polled; ``message`` is the reason the index and the log show."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NoVersionsError(InvalidArgumentError):
    """The version policy selects nothing on disk (a load failure, not a poll failure, in Triton)."""


@dataclass(slots=True)
class LoadPlan:
    """A polled model: its effective configuration and the versions to load (``failure``: the reason
    every version will fail with, when the backend could not complete the configuration)."""

    name: str
    path: Path
    config: mc.ModelConfig
    signature: ModelSignature
    config_json: dict[str, Any]
    versions: list[int]
    fingerprints: dict[int, str]
    source_fingerprint: str
    dependencies: tuple[str, ...]
    scratch: Path | None
    failure: str = ""
    namespace: str = ""
    #: Per version, the fingerprint without the instance groups (``fingerprint_text(instances=False)``).
    base_fingerprints: dict[int, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return model_key(self.name, self.namespace)


class ModelLoader:
    """Polls models and builds versions; every method blocks and runs off the event loop."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        auto_complete: bool = True,
        gpu_count: int = 0,
        rate_limiter: RateLimiter | None = None,
        start_delay: StartDelay = NO_DELAY,
        config_name: str = "",
        gpu_limits: Mapping[int, float] | None = None,
    ) -> None:
        """``config_name``: ``--model-config-name``; ``gpu_limits``: ``--model-load-gpu-limit`` (device:
        the share of its memory past which a GPU instance's load fails)."""
        self.runtime = runtime
        self.auto_complete = auto_complete
        self.gpu_count = gpu_count
        #: Measures versions' GPU footprints (for ``--model-gpu-memory-budget``); only where GPUs are.
        self.gpu_memory = GpuMemory.open() if gpu_count else None
        self.rate_limiter = rate_limiter
        self.start_delay = start_delay
        self.config_name = config_name
        self.gpu_limits = dict(gpu_limits or {})
        self._overlapping = OverlappingLoads()

    def poll(self, name: str, location: ModelLocation | None, request: LoadRequest | None) -> LoadPlan:
        """Find and configure ``name``; :class:`PollError` or :class:`NoVersionsError` on failure."""
        scratch: Path | None = None
        if request is not None and request.files:
            if request.config is None:
                raise PollError("Load parameter 'config' must be specified for model file override")
            try:
                scratch, model_dir = write_model_files(name, request.files)
            except OverrideError as exc:
                raise PollError(str(exc)) from exc
            location = ModelLocation(name, model_dir)
        try:
            return self._poll(name, location, request, scratch)
        except BaseException:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            raise

    def _poll(
        self, name: str, location: ModelLocation | None, request: LoadRequest | None, scratch: Path | None
    ) -> LoadPlan:
        if location is None:
            raise PollError(f"model '{name}' is not found in any model repository")
        if location.duplicates:
            others = ", ".join(str(p) for p in location.duplicates)
            raise PollError(f"model '{name}' appears in more than one repository: {location.path}, {others}")
        source_fingerprint = folder_fingerprint([location.path])
        try:
            if request is not None and request.config is not None:
                config = cfg.parse_json(request.config)
            else:
                config = cfg.read_config(location.path, self.config_name)
                if request is not None and request.config_override is not None:
                    config = cfg.merge_json(config, request.config_override)
            versions = available_versions(location.path)
            if not config.name:
                config.name = name
            cfg.resolve_backend(config, location.path, versions)
            if log.isEnabledFor(logging.DEBUG):
                # Triton's verbose line after its server-side autofill: users read it to see what a
                # config without ``backend`` (or a model file's name) was taken to be
                text = text_format.MessageToString(cfg.autofilled(config))
                log.debug("%s", text, extra={"heading": "Server side auto-completed config: "})
            self._resolve_runtime(config)
            failure = self._complete(config, location.path, versions)
            cfg.normalize(config, name, self.gpu_count, check_io=not self.auto_complete)
            failure = failure or cfg.version_problem(config, self.gpu_count, check_io=self.auto_complete)
        except InferenceServerError as exc:
            raise PollError(exc.message) from exc
        except Exception as exc:  # a bug reading one model must not stop the server
            log.exception("polling model '%s' failed", name)
            raise PollError(f"{type(exc).__name__}: {exc}") from exc
        selected = cfg.selected_versions(config, versions)
        if not selected:
            raise NoVersionsError(
                f"at least one version must be available under the version policy of model '{name}'"
            )
        full_text, base_text = cfg.fingerprint_text(config), cfg.fingerprint_text(config, instances=False)
        fingerprints, base_fingerprints = version_fingerprints(location.path, selected, full_text, base_text)
        return LoadPlan(
            namespace=location.namespace,
            name=name,
            path=location.path,
            config=config,
            signature=cfg.signature_of(config) if not failure else ModelSignature(name, 0, (), ()),
            config_json=cfg.to_json(config),
            versions=selected,
            fingerprints=fingerprints,
            base_fingerprints=base_fingerprints,
            source_fingerprint=source_fingerprint,
            dependencies=cfg.dependencies(config),
            scratch=scratch,
            failure=failure,
        )

    def _resolve_runtime(self, config: mc.ModelConfig) -> None:
        """A model whose backend is a Python-based one (``<backend directory>/<backend>/model.py``)
        gets ``runtime: "model.py"``, as Triton writes it, and runs on the Python backend."""
        if config.platform == "ensemble" or config.backend == "python":
            return
        if not config.runtime and self.runtime.python_based(config.backend) is not None:
            config.runtime = PYTHON_RUNTIME
        elif config.runtime == PYTHON_RUNTIME and self.runtime.python_based(config.backend) is None:
            searched = (self.runtime.backend_directory or Path()) / config.backend / PYTHON_RUNTIME
            raise InvalidArgumentError(
                f"unable to find Python backend based backend library '{PYTHON_RUNTIME}' for model "
                f"'{config.name}', searched: '{searched}'"
            )

    def _backend(self, config: mc.ModelConfig) -> Backend:
        """The backend that serves ``config``'s model: the Python backend for a Python-based one."""
        return self.runtime.backend("python" if config.runtime == PYTHON_RUNTIME else config.backend)

    def _model_file(self, config: mc.ModelConfig, version_dir: Path) -> Path:
        """The file an instance loads: the version's, or a Python-based backend's ``model.py``."""
        if config.runtime == PYTHON_RUNTIME:
            based = self.runtime.python_based(config.backend)
            if based is not None:
                return based
        return version_dir / config.default_model_filename

    def _check_gpu_limit(self, name: str, device: int) -> None:
        """``--model-load-gpu-limit``: checked after each GPU instance is created, as Triton checks it, so
        that an instance cannot take what the limit keeps free before the check sees it."""
        share = self.gpu_memory.used_share(device) if self.gpu_memory is not None else None
        if share is not None and share > self.gpu_limits[device]:
            raise UnavailableError(
                f"can not create model '{name}': memory limit set for GPU {device} has exceeded, "
                "model loading is rejected."
            )

    def _complete(self, config: mc.ModelConfig, model_dir: Path, versions: list[int]) -> str:
        """Let the backend auto-complete the config; the reason if it cannot.

        Triton does this when the backend initializes the model, so a failure here (a missing
        backend, a model file that does not import) fails the versions, not the poll.
        """
        if config.platform == "ensemble":
            return ""
        if config.runtime not in ("", PYTHON_RUNTIME):
            problem = self._library_problem(config, model_dir, versions)
            if problem:
                return problem
        self.runtime.settings.announce("python" if config.runtime == PYTHON_RUNTIME else config.backend)
        try:
            backend = self._backend(config)
            if self.auto_complete:
                backend.auto_complete(config, model_dir, model_dir / str(versions[-1]) if versions else None)
        except InferenceServerError as exc:
            return status_text(exc)  # (its code kept: the versions fail with it)
        except Exception as exc:  # a bug in a backend's auto-complete must not stop the server
            log.exception("auto-completing the configuration of model '%s' failed", config.name)
            return f"{type(exc).__name__}: {exc}"
        return ""

    def _library_problem(self, config: mc.ModelConfig, model_dir: Path, versions: list[int]) -> str:
        """Why a ``runtime`` naming a backend library fails the versions, in Triton's words ("" when
        it names the backend's own library, ``libtriton_<backend>.so``, which this server provides).

        Triton looks for the file in the version's folder, the model's, then the backend's folder
        under ``--backend-directory``, and refuses a name that leads out of where it was found (a
        model must not load a library from elsewhere on the machine).  A library found where it
        may be is a C++ backend, which this server cannot run."""
        library = config.runtime
        if library == f"libtriton_{config.backend}.so" and registry.built_in(config.backend):
            return ""
        backends = self.runtime.backend_directory or Path("/opt/tritonserver/backends")
        version_dir = model_dir / str(versions[-1]) if versions else model_dir
        searched = [version_dir, model_dir, backends / config.backend]
        found = next((folder for folder in searched if (folder / library).is_file()), None)
        if found is None:
            paths = "".join(f"'{folder}' " for folder in searched)
            return (
                f"Invalid argument: unable to find backend library '{library}' for model "
                f"'{config.name}', searched: {paths}"
            )
        if not (found / library).resolve().is_relative_to(found.resolve()):
            return (
                f"Invalid argument: backend library name '{library}' escapes backend directory "
                f"'{found}', for model '{config.name}', check model config runtime field"
            )
        return (
            f"Invalid argument: backend library '{found / library}' of model '{config.name}' is a C++ "
            "Triton backend, which this server cannot load (its backends are Python, ONNX Runtime, "
            "PyTorch, TensorRT and Python-based backends)"
        )

    def build_version(
        self, plan: LoadPlan, version: int, previous: ModelVersion | None = None
    ) -> ModelVersion:
        """Create, warm up and schedule every instance of one version; READY, or raise the reason.

        ``previous``: the version loaded now, when only its instance groups changed (Triton's
        instance update): each instance whose signature the new groups still have is taken over
        instead of created (no ``initialize``, no warm-up; its old version's last executions on it
        finish first), and the old version, unloaded once the new one is published, finalizes only
        the instances not taken over.  Statistics carry on."""
        if plan.failure:
            raise InternalError(plan.failure)
        kept: dict[str, list[InstanceWorker]] = {}
        for old in previous.workers if previous is not None else ():
            kept.setdefault(old.signature, []).append(old)
        taken: list[InstanceWorker] = []
        started, resident = time.monotonic_ns(), resident_bytes()
        gpu_before = self.gpu_memory.used() if self.gpu_memory is not None else ()
        overlap = self._overlapping.begin()
        config = plan.config
        samples = warmup_samples(config, plan.path)
        backend = self._backend(config)
        version_dir = plan.path / str(version)
        workers: list[InstanceWorker] = []
        #: ``passive`` instances: loaded and initialized, never sent a request (Triton's, for backends
        #: that hand work to them themselves); no warmup, no rate limiter, closed with the version.
        passive: list[InstanceWorker] = []
        health = previous.health if previous is not None and previous.health is not None else InstanceHealth()
        try:
            for group in config.instance_group:
                kind = _KIND_NAMES.get(group.kind, "CPU")
                devices = list(group.gpus) if kind == "GPU" else [0]
                for device in devices:
                    signature = _instance_signature(group, device)
                    for index in range(group.count):
                        if kept.get(signature) and not group.passive:
                            old = kept[signature].pop(0)
                            taken.append(old)
                            workers.append(old.successor())
                            continue
                        instance_name = f"{group.name}_{index}"  # (Triton's name: the group's, its index)
                        context = InstanceContext(
                            model_name=plan.name,
                            model_version=version,
                            model_dir=plan.path,
                            version_dir=version_dir,
                            model_file=self._model_file(config, version_dir),
                            config=config,
                            signature=plan.signature,
                            instance_name=instance_name,
                            kind=kind,
                            device_id=device,
                            health=health,
                        )
                        instance = backend.create_instance(context)
                        worker = InstanceWorker(instance, instance_name, signature)
                        (passive if group.passive else workers).append(worker)
                        if kind == "GPU" and device in self.gpu_limits:
                            self._check_gpu_limit(plan.name, device)
                        if samples and not group.passive:
                            run_warmup(instance, samples, plan.name, instance_name)
            if not workers:
                raise InvalidArgumentError(
                    f"model '{plan.name}' has only passive instances: none would run its requests"
                )
        except BaseException:
            self._overlapping.end(overlap)
            for old in taken:  # the old version keeps serving with them
                old.kept = False
            for worker in (*workers, *passive):
                worker.close()  # (not the instances taken over)
            raise
        loads = self._overlapping.end(overlap)
        # the scheduler owns the workers from here on, even if it raises
        try:
            scheduler = create_scheduler(config, workers, plan.path, self.rate_limiter, self.start_delay)
        except BaseException:
            for old in taken:
                old.kept = False
            for worker in passive:
                worker.close()
            raise
        if previous is not None and previous.scheduler is not None:
            scheduler.stats.carry_over(previous.scheduler.stats)
        model_version = ModelVersion(
            version,
            ModelState.READY,
            scheduler=scheduler,
            fingerprint=plan.fingerprints[version],
            base_fingerprint=plan.base_fingerprints.get(version, ""),
            workers=tuple(workers),
            passive=tuple(passive),
            model_name=plan.name,
            model_dir=plan.path,
            scratch=plan.scratch,
            load_ns=time.monotonic_ns() - started,
            memory_bytes=version_bytes(
                [w.instance for w in (*workers, *passive)], (resident_bytes() - resident) // loads
            ),
            gpu_memory_bytes=(
                tuple(grown // loads for grown in gpu_growth(gpu_before, self.gpu_memory.used()))
                if self.gpu_memory is not None
                else ()
            ),
            health=health,
        )
        model_version.readiness = readiness_of([worker.instance for worker in workers])
        model_version.checked = model_version.readiness is not None
        health.on_failure = model_version.fail
        if health.failure:  # an instance gave up between loading and now
            model_version.fail(health.failure)
        return model_version


def _instance_signature(group: mc.ModelInstanceGroup, device: int) -> str:
    """What identifies an instance of ``group`` on ``device`` for an instance update: the group
    without its name, count and device list (Triton matches instances so: renaming or regrouping
    them keeps them)."""
    plain = mc.ModelInstanceGroup()
    plain.CopyFrom(group)
    plain.ClearField("name")
    plain.ClearField("count")
    plain.ClearField("gpus")
    return f"{device}:{plain.SerializeToString(deterministic=True).hex()}"
