"""What a model process needs to host one instance, and the per-model options of the Python backend.

The engine never runs model code, so the instance is described to the model process by a small,
picklable :class:`ModelSpec` built from the instance's context: plain strings and flags, no
protobuf, so a model process imports neither protobuf nor tritonclient (it starts faster and stays
smaller, and a custom execution environment needs nothing but numpy).  This module imports nothing
that needs them either, since a model process unpickles the spec.

:class:`ProcessOptions` reads the config parameters that decide how the instance is isolated.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from naiad.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

#: ``"true"`` (the default) runs the model's instances in model processes; ``"false"`` runs a trusted
#: model inside the engine, the fastest path, where its crash is the server's crash.
PROCESSES_PARAMETER = "NAIAD_INSTANCE_PROCESSES"
#: Resident memory a model process may use, in MiB; crossing it kills that process (Naiad only).
MEMORY_LIMIT_PARAMETER = "NAIAD_MEMORY_LIMIT_MIB"
#: Seconds one execution may take; a longer one fails its requests and restarts the instance (Naiad only).
TIMEOUT_PARAMETER = "NAIAD_EXECUTION_TIMEOUT_SECONDS"
#: Triton's custom execution environment: a conda-pack archive or a folder (see ``environment``).
ENV_PARAMETER = "EXECUTION_ENV_PATH"
#: Triton's placeholder for the model's folder in ``EXECUTION_ENV_PATH``.
MODEL_DIRECTORY_PLACEHOLDER = "$$TRITON_MODEL_DIRECTORY"
#: Microseconds a model process that answered its executions, and the engine that sent a model
#: process its only execution in flight, watch the socket for the next message before they block
#: (environment variable, read by the engine and its model processes; 0 blocks at once).  A process
#: woken from a blocking read costs both sides tens of microseconds of CPU and as much latency; a
#: short watch spares that when the message is near.  Each side watches only while its last wait was
#: shorter than the watch (``messages.Watch``), so a model whose next execution comes later (most
#: models of a busy multi-model server, a slow client) does not pay for watches that end in a block
#: anyway; the engine watches only while the execution is the server's only request, since its watch
#: holds the event loop.  200 us: HTTP ``add_sub`` at concurrency 1 answered in 121 us instead of
#: 237 (126 with the model in the engine), and at 16 connections +2% CPU per request, +3% requests/s
#: (benchmarks/isolation, fifteenth session).  Bounded either way, yielding the core meanwhile (see
#: ``Wire.arrives_within``).
SPIN_VARIABLE = "NAIAD_PROCESS_SPIN_US"
DEFAULT_SPIN_US = 200.0
#: Microseconds a model process watches instead once the engine said, for several executions in a
#: row (``messages.LONE_STREAK``), that each was the server's only request in flight: one client
#: calling one request at a time.  Its next request then comes after the client's whole round trip,
#: longer than the short watch over gRPC (~450 us here), so without this the process blocks and is
#: woken cold for every call: +115..+160 us over the engine path at concurrency 1, against -73..+30
#: with it (benchmarks/isolation, twentieth session).  The price is the CPU of the watch while such a
#: client calls (the server's tree 1.5 cores instead of 0.8 here, as a 200-us watch already costs
#: over HTTP), and nothing under load: a streak of lone executions ends with the second request in
#: flight.  Not longer than the short watch's setting, and off with it (0).
LONE_SPIN_VARIABLE = "NAIAD_PROCESS_LONE_SPIN_US"
DEFAULT_LONE_SPIN_US = 1000.0
#: Where the CPU controller of this process's cgroup is found (v2, or v1's ``cpu`` hierarchy).
CGROUP_ROOT = Path("/sys/fs/cgroup")


def spin_seconds(variable: str = SPIN_VARIABLE, default_us: float = DEFAULT_SPIN_US) -> float:
    """The watch of ``variable`` in seconds (``default_us`` if unset or not a number >= 0).

    The default is no watch for a process that may use less than two CPUs: one only (``taskset``, a
    Kubernetes pod given whole CPUs by the static CPU manager), where the peer it waits for needs that
    very CPU and a watch measured worse than none (HTTP ``add_sub`` at concurrency 1: 258 us against
    205), or a CPU limit under two (a pod's ``resources.limits.cpu``), which a watch would spend and
    then have the whole pod throttled."""
    quota = cpu_limit(CGROUP_ROOT)
    cpus = min(len(os.sched_getaffinity(0)), quota if quota is not None else math.inf)
    default = default_us if cpus >= 2 else 0.0
    try:
        value = float(os.environ.get(variable, default))
    except ValueError:
        value = default
    return max(value, 0.0) / 1e6


def lone_spin_seconds() -> float:
    """The watch of :data:`LONE_SPIN_VARIABLE` in seconds; 0 when the short watch is off."""
    return spin_seconds(LONE_SPIN_VARIABLE, DEFAULT_LONE_SPIN_US) if spin_seconds() else 0.0


def cpu_limit(root: Path) -> float | None:
    """The CPUs the cgroup under ``root`` may use (its CFS quota over its period), ``None`` if
    unlimited or unknown: ``cpu.max`` (cgroup v2), else ``cpu/cpu.cfs_quota_us`` (v1)."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One instance, as its host (in a model process or in the engine) loads it."""

    model_file: Path
    model_name: str
    model_version: str
    instance_name: str
    #: The seven string arguments Triton passes to ``initialize``.
    args: dict[str, str]
    outputs: tuple[str, ...]
    decoupled: bool
    #: Bytes per batch item (per request when the model does not batch) of each output whose size the
    #: config fixes (no -1 dim, not BYTES): the engine reserves that much where a frontend worker's
    #: request's response goes, and the model process writes a matching output there directly.
    output_bytes: tuple[tuple[str, int], ...] = ()
    max_batch_size: int = 0
    #: The config ``reshape``s applied around the model, ``(name, dims, reshape)`` of its inputs and of
    #: its outputs (see :mod:`naiad.backends.python.reshapes`).
    input_reshapes: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = ()
    output_reshapes: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = ()

    @property
    def version_dir(self) -> str:
        """The model's version folder (``pb_utils.get_model_dir()``), from ``initialize``'s arguments:
        for a Python-based backend's model, not where its ``model.py`` is."""
        return str(Path(self.args["model_repository"]) / self.args["model_version"])


@dataclass(frozen=True, slots=True)
class ProcessOptions:
    """How a model's instances are isolated, from its config parameters."""

    in_process: bool = False
    memory_limit_bytes: int = 0
    execution_timeout_s: float = 0.0
    #: The custom execution environment (archive or folder), ``None`` for the server's own Python.
    environment: Path | None = None

    @classmethod
    def of(cls, config: mc.ModelConfig, model_dir: Path) -> ProcessOptions:
        """Read the options; raise InvalidArgumentError (the load fails) for a malformed one."""
        name = config.name or model_dir.name
        choice = _text(config, PROCESSES_PARAMETER).lower() or "true"
        if choice not in ("true", "false"):
            raise InvalidArgumentError(
                f"model '{name}': parameter {PROCESSES_PARAMETER} must be 'true' or 'false', not '{choice}'"
            )
        limit = _number(config, MEMORY_LIMIT_PARAMETER, name)
        timeout = _number(config, TIMEOUT_PARAMETER, name)
        env = _text(config, ENV_PARAMETER)
        environment = Path(env.replace(MODEL_DIRECTORY_PLACEHOLDER, str(model_dir))) if env else None
        if environment is not None and not environment.is_absolute():
            environment = model_dir / environment
        in_process = choice == "false"
        if in_process and (limit or timeout or environment):
            raise InvalidArgumentError(
                f"model '{name}': {PROCESSES_PARAMETER} 'false' runs the model inside the server, where "
                f"{MEMORY_LIMIT_PARAMETER}, {TIMEOUT_PARAMETER} and {ENV_PARAMETER} cannot apply"
            )
        return cls(in_process, int(limit * (1 << 20)), timeout, environment)


def _text(config: mc.ModelConfig, key: str) -> str:
    parameter = config.parameters.get(key)
    return "" if parameter is None else str(parameter.string_value).strip()


def _number(config: mc.ModelConfig, key: str, name: str) -> float:
    text = _text(config, key)
    if not text:
        return 0.0
    if not re.fullmatch(r"\d+(\.\d*)?|\.\d+", text) or float(text) <= 0:
        raise InvalidArgumentError(f"model '{name}': parameter {key} must be a positive number, not '{text}'")
    return float(text)
