"""``InferenceService`` (``crds/inferenceservices.serving.naiad.dev.yaml``): spec and status.

Status vocabulary follows KServe's model status (``transitionStatus``: UpToDate, InProgress,
BlockedByFailedLoad, InvalidSpec) so users who know it can read ours, with per-pod truth added.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from naiad_operator.api.base import CamelModel, Condition


class RepositoryRef(CamelModel):
    name: str
    snapshot: str | None = None


class LatestPolicy(CamelModel):
    num_versions: int = 1


class SpecificPolicy(CamelModel):
    versions: list[int]


class VersionPolicy(CamelModel):
    """Triton's ``version_policy``; no field set means latest 1, Triton's default."""

    latest: LatestPolicy | None = None
    specific: SpecificPolicy | None = None
    all: dict[str, Any] | None = None


class PlacementMode(StrEnum):
    ALL = "all"
    """Every pod loads the model (at start and in place)."""
    ON_DEMAND = "onDemand"
    """No pod loads it ahead: each server loads it when a request names it (``--load-on-demand``)."""


class CopiesPlacement(CamelModel):
    """``placement: {copies: k}``: k pods hold the model warm; the others forward its requests to them."""

    copies: int = Field(ge=1)


Placement = PlacementMode | CopiesPlacement


class ModelSpec(CamelModel):
    name: str
    required: bool = True
    version_policy: VersionPolicy = Field(default_factory=VersionPolicy)
    config_override: dict[str, Any] | None = None
    placement: Placement = PlacementMode.ALL
    """Which pods hold the model: ``all``, ``{copies: k}`` or ``onDemand`` (docs/operator.md)."""

    @property
    def copies(self) -> int | None:
        """k for ``{copies: k}``; None for the other placements."""
        return self.placement.copies if isinstance(self.placement, CopiesPlacement) else None

    @property
    def on_demand(self) -> bool:
        return self.placement is PlacementMode.ON_DEMAND


class Resources(CamelModel):
    requests: dict[str, str | int] = Field(default_factory=dict)
    limits: dict[str, str | int] = Field(default_factory=dict)


class ServerSpec(CamelModel):
    image: str | None = None
    image_pull_policy: str = "IfNotPresent"
    args: list[str] = Field(default_factory=list)
    env: list[dict[str, Any]] = Field(default_factory=list)
    env_from: list[dict[str, Any]] = Field(default_factory=list)
    volume_mounts: list[dict[str, Any]] = Field(default_factory=list)
    gpus: int = 0
    resources: Resources = Field(default_factory=Resources)
    startup_timeout_seconds: int = 600
    security_context: dict[str, Any] | None = None


class PodTemplate(CamelModel):
    """The server pods' pod-level fields. Names the operator owns (the ``server`` container, the
    ``repository`` and ``tmp`` volumes) are refused by the CRD's rules, so an addition can never replace
    or shadow them."""

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    affinity: dict[str, Any] | None = None
    topology_spread_constraints: list[dict[str, Any]] = Field(default_factory=list)
    service_account_name: str | None = None
    priority_class_name: str | None = None
    image_pull_secrets: list[dict[str, Any]] = Field(default_factory=list)
    runtime_class_name: str | None = None
    scheduler_name: str | None = None
    security_context: dict[str, Any] | None = None
    shm_size: str | None = None
    volumes: list[dict[str, Any]] = Field(default_factory=list)
    init_containers: list[dict[str, Any]] = Field(default_factory=list)
    containers: list[dict[str, Any]] = Field(default_factory=list)
    """Sidecars: extra containers beside ``server`` (init containers with ``restartPolicy: Always`` are
    native sidecars and go in ``init_containers``)."""


class ScaleMetric(StrEnum):
    CPU = "CPU"
    QUEUE_TIME = "QueueTime"


class Autoscaling(CamelModel):
    min_replicas: int = 1
    max_replicas: int
    metric: ScaleMetric = ScaleMetric.CPU
    target_cpu_utilization_percentage: int = Field(default=80, alias="targetCPUUtilizationPercentage")
    target_queue_time_microseconds: int = 50000


class Disruption(CamelModel):
    min_available: int | str | None = None
    max_unavailable: int | str | None = None


class Rollout(CamelModel):
    max_surge: int | str = 1
    max_unavailable: int | str = 0
    progress_deadline_seconds: int = 1800


class InferenceServiceSpec(CamelModel):
    repository: RepositoryRef
    models: list[ModelSpec]
    server: ServerSpec = Field(default_factory=ServerSpec)
    pod_template: PodTemplate = Field(default_factory=PodTemplate)
    replicas: int = 1
    autoscaling: Autoscaling | None = None
    disruption: Disruption | None = None
    rollout: Rollout = Field(default_factory=Rollout)


class Phase(StrEnum):
    PENDING = "Pending"
    PROGRESSING = "Progressing"
    READY = "Ready"
    DEGRADED = "Degraded"
    FAILED = "Failed"


class TransitionStatus(StrEnum):
    UP_TO_DATE = "UpToDate"
    IN_PROGRESS = "InProgress"
    BLOCKED_BY_FAILED_LOAD = "BlockedByFailedLoad"
    INVALID_SPEC = "InvalidSpec"


class ModelState(StrEnum):
    PENDING = "Pending"
    LOADING = "Loading"
    LOADED = "Loaded"
    FAILED_TO_LOAD = "FailedToLoad"
    UNAVAILABLE = "Unavailable"


class Copies(CamelModel):
    desired: int = 0
    ready: int = 0
    loading: int = 0
    failed: int = 0


class Holder(CamelModel):
    """A pod that holds a model loaded (some version READY), where peers reach it, and the memory the
    model measured there (the index's ``memory_bytes``; absent from servers that do not report it)."""

    pod: str
    address: str | None = None
    """``host:httpport:grpcport``, as the peers file names it."""
    memory_bytes: int | None = None


class ReplicaState(CamelModel):
    pod: str
    state: str
    versions: list[int] = Field(default_factory=list)
    reason: str | None = None


class Failure(CamelModel):
    reason: str
    message: str
    pod: str | None = None
    version: int | None = None
    time: str | None = None


class ModelStatus(CamelModel):
    """What status says about one model. ``active_versions``, ``default_version``, ``content_hashes``
    and ``blocked_hashes`` are also the rollout's memory: the operator keeps no state of its own."""

    name: str
    required: bool = True
    transition_status: TransitionStatus = TransitionStatus.IN_PROGRESS
    state: ModelState = ModelState.PENDING
    active_versions: list[int] = Field(default_factory=list)
    target_versions: list[int] = Field(default_factory=list)
    default_version: int | None = None
    content_hashes: dict[int, str] = Field(default_factory=dict)
    blocked_hashes: dict[int, str] | None = None
    copies: Copies = Field(default_factory=Copies)
    replicas: list[ReplicaState] = Field(default_factory=list)
    held_by: list[Holder] = Field(default_factory=list)
    """The pods that hold the model now (with ``placement: {copies: k}`` or ``onDemand``, some of them),
    at most ``replicaDetailLimit``."""
    last_failure: Failure | None = None


class SnapshotRef(CamelModel):
    active: str | None = None
    target: str | None = None


class InferenceServiceStatus(CamelModel):
    observed_generation: int | None = None
    phase: Phase | None = None
    conditions: list[Condition] = Field(default_factory=list)
    replicas: int | None = None
    ready_replicas: int | None = None
    selector: str | None = None
    url: str | None = None
    grpc_address: str | None = None
    models_ready: str | None = None
    snapshot: SnapshotRef = Field(default_factory=SnapshotRef)
    models: list[ModelStatus] = Field(default_factory=list)

    def model(self, name: str) -> ModelStatus | None:
        return next((m for m in self.models if m.name == name), None)
