"""What the operator observes: server pods and their repository indexes, sync Jobs, Deployments.

``k8s`` produces these from API objects and HTTP answers; ``reconcile`` decides from them. Keeping them
plain frozen dataclasses (not API dicts) is what lets the decisions be tested without a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from naiad_operator import GROUP

#: The pod annotation naming the snapshot a ``perPod`` server pod pulled into its own volume.
SNAPSHOT_ANNOTATION = f"{GROUP}/snapshot"

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
    peer: str | None = None
    """``host:httpport:grpcport``: where other servers forward requests for the models this one holds."""
    memory: dict[str, int] = field(default_factory=dict)
    """model -> resident bytes its loaded versions measured (servers that report ``memory_bytes``)."""

    @property
    def reporting(self) -> bool:
        return self.url is not None and self.index_error is None

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
