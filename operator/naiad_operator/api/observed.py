"""What the operator observes: server pods and their repository indexes, sync Jobs, Deployments.

``k8s`` produces these from API objects and HTTP answers; ``reconcile`` decides from them. Keeping them
plain frozen dataclasses (not API dicts) is what lets the decisions be tested without a cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from naiad_operator import GROUP

#: The pod annotation naming the snapshot a ``perPod`` server pod pulled into its own volume.
SNAPSHOT_ANNOTATION = f"{GROUP}/snapshot"

#: The condition type of the operator's readiness gate on server pods (``reconcile.readiness``).
GATE = f"{GROUP}/models-loaded"

_START = re.compile(r"container start (\d+)")


def gate_message(open_: bool, restarts: int) -> str:
    """The gate condition's message: it names the container start the condition was written for."""
    return f"{'serves' if open_ else 'held back from'} the fleet's models (container start {restarts})"


def opened_for(condition: dict[str, Any]) -> int | None:
    """The container start an open gate condition holds for (None: not open, or not ours)."""
    if condition.get("status") != "True":
        return None
    found = _START.search(str(condition.get("message") or ""))
    return int(found.group(1)) if found else None


#: The reason Triton's index gives a version that is UNAVAILABLE because it was unloaded (on purpose,
#: or because it belonged to a load that failed for another version): not a failure of its own.
UNLOADED = "unloaded"


class VersionState(StrEnum):
    """Triton's repository-index states of one model version."""

    UNKNOWN = "UNKNOWN"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"


@dataclass(frozen=True, slots=True)
class VersionObservation:
    state: VersionState
    reason: str = ""


@dataclass(frozen=True, slots=True)
class PodProblem:
    """Why a pod is not running or not Ready, as Kubernetes tells it: ``reason`` is a short word
    (``InsufficientGPU``, ``ImagePullBackOff``, ``CrashLoopBackOff``, ``FailedMount``, ``MultiAttach``,
    ``SnapshotMismatch``...), ``message`` the detail (the scheduler's, the kubelet's or the container's
    last words)."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class PodObservation:
    """One server pod: Kubernetes readiness, and (when it answered) its repository index.

    ``models`` maps model name -> version -> state; a model listed by name only (never loaded, or
    unloaded) is absent. ``index_error`` is set when the pod did not answer the index call.
    """

    name: str
    url: str | None
    ready: bool
    models: dict[str, dict[int, VersionObservation]] = field(default_factory=dict)
    index_error: str | None = None
    snapshot: str | None = None
    """The snapshot the pod was started with (``perPod`` storage: its own copy), from its annotation."""
    problem: PodProblem | None = None
    metrics_url: str | None = None
    """Where the pod's Prometheus endpoint answers (its ``metrics`` port): per-version traffic."""
    containers_ready: bool = False
    """The server container passes its readiness probe (``ContainersReady``); with the operator's
    readiness gate still closed the pod is not Ready, so not in the Service's endpoints, yet."""
    gated: bool = False
    """The pod carries the operator's readiness gate: it joins the Service only once the operator
    loaded on it what the fleet serves (override, pinned version), not what it loaded at start."""
    gate_open: bool = False
    """The gate is open for the container running now (one opened before a restart does not count)."""
    gate_set: bool = False
    """The gate condition says True in the API (possibly for an earlier container start)."""
    restarts: int = 0
    memory: dict[str, dict[int, int]] = field(default_factory=dict)
    """model -> version -> resident bytes its load added, from the pod's metrics (empty: not read)."""
    peer: str | None = None
    """``host:httpport:grpcport``: where other servers forward requests for the models this one holds."""
    held_bytes: dict[str, int] = field(default_factory=dict)
    """model -> resident bytes its loaded versions report in the index (``memory_bytes``; servers that
    do not report it: empty)."""

    @property
    def reporting(self) -> bool:
        return self.url is not None and self.index_error is None

    @property
    def up(self) -> bool:
        """Its server answers and the operator may act on it: Ready, or held out by the gate only."""
        return self.ready or (self.gated and self.containers_ready)

    @property
    def preparing(self) -> bool:
        """Up but held out of the Service by the gate until the operator has loaded its models."""
        return self.gated and self.containers_ready and not self.gate_open

    def holds(self, model: str) -> bool:
        """Some version of ``model`` is loaded or loading here: there is something to unload. (After an
        unload the index still lists the versions, UNAVAILABLE, so presence alone is not enough.)"""
        return any(
            o.state in (VersionState.READY, VersionState.LOADING) for o in self.models.get(model, {}).values()
        )

    def ready_versions(self, model: str) -> frozenset[int]:
        return frozenset(v for v, o in self.models.get(model, {}).items() if o.state is VersionState.READY)

    def failed_versions(self, model: str) -> dict[int, str]:
        """The versions that failed to load here, with the server's reason (unloaded ones are not)."""
        return {
            v: o.reason
            for v, o in self.models.get(model, {}).items()
            if o.state is VersionState.UNAVAILABLE and o.reason != UNLOADED
        }

    def loading_versions(self, model: str) -> frozenset[int]:
        return frozenset(v for v, o in self.models.get(model, {}).items() if o.state is VersionState.LOADING)


@dataclass(frozen=True, slots=True)
class VersionCounters:
    """One model version's cumulative request counters on one pod, from its ``/metrics``:
    ``nv_inference_request_success`` and ``_failure`` (all reasons), and the successful requests'
    latency histogram ``nv_inference_request_histogram_ms`` as (upper bound in ms, cumulative count),
    ascending, the last bound infinite."""

    success: float = 0.0
    failure: float = 0.0
    latency_sum_ms: float = 0.0
    buckets: tuple[tuple[float, float], ...] = ()


#: One pod's counters: (model, version) -> counters; a version not loaded there is absent.
PodCounters = dict[tuple[str, int], VersionCounters]


@dataclass(frozen=True, slots=True)
class DeploymentObservation:
    replicas: int = 0
    ready_replicas: int = 0
    updated_replicas: int = 0
    generation: int = 0
    observed_generation: int = 0
    stalled: str | None = None
    """The message of ``Progressing=False/ProgressDeadlineExceeded``: the rollout gave up waiting."""


@dataclass(frozen=True, slots=True)
class JobObservation:
    """A sync Job: finished or not, and the termination message of its (last) pod."""

    name: str
    succeeded: bool = False
    failed: bool = False
    start_time: str | None = None
    completion_time: str | None = None
    message: str | None = None
    problem: PodProblem | None = None
    """Why the running Job's pod is stuck (unschedulable, image pull, mount), while it is."""

    @property
    def finished(self) -> bool:
        return self.succeeded or self.failed
