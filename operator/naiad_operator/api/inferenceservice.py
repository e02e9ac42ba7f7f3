"""``InferenceService`` (``crds/inferenceservices.serving.naiad.dev.yaml``): spec and status.

Status vocabulary follows KServe's model status (``transitionStatus``: UpToDate, InProgress,
BlockedByFailedLoad, InvalidSpec) so users who know it can read ours, with per-pod truth added.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

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


class RolloutStrategy(StrEnum):
    """How a model's new versions (or new config) reach the pods.

    ``both``: every pod loads old and new side by side, then all switch (no pod leaves the Service, but
    each holds both versions for a while). ``perPod``: one pod at a time leaves the Service's endpoints,
    drops the old version, loads the new one and comes back (never both in one pod's memory).
    ``canary``: both versions stay loaded while traffic shifts by weight."""

    BOTH = "both"
    PER_POD = "perPod"
    CANARY = "canary"


class CanaryAnalysis(CamelModel):
    """When a canary step passes: the new version's figures over the step's window, summed over every
    pod. A bound left out is not checked; ``min_requests`` holds a step until it saw that much traffic."""

    max_error_rate: float | None = None
    max_p99_latency_ms: float | None = None
    min_requests: int = 0


class ModelRollout(CamelModel):
    """How a new version (or a new ``configOverride``) replaces the old one on the pods.

    ``strategy`` unset: ``both``, unless the model's measured footprint says old and new together would
    not fit in the pod's memory limit, then ``perPod``. ``canary``: both stay loaded while the share of
    requests naming no version moves to the new one step by step (percent), each step held
    ``pause_seconds`` and judged by ``analysis``."""

    strategy: RolloutStrategy | None = None
    steps: list[int] = Field(default_factory=lambda: [10, 50, 100])
    pause_seconds: int = 60
    analysis: CanaryAnalysis = Field(default_factory=CanaryAnalysis)


class Mirror(CamelModel):
    """Shadow traffic: ``percent`` of the requests naming no version are also sent to ``version``
    (kept loaded beside the served ones), whose answers are discarded."""

    version: int
    percent: int


class PlacementMode(StrEnum):
    ALL = "all"
    """Every pod loads the model (at start and in place)."""
    ON_DEMAND = "onDemand"
    """No pod loads it ahead: each server loads it when a request names it (``--load-on-demand``)."""


class CopiesPlacement(CamelModel):
    """``placement: {copies: k}``: k pods hold the model warm; the others forward its requests to them.

    With ``max_copies`` k is a floor: the operator holds one copy per ``target_requests_per_second`` of
    the model's measured request rate, between ``copies`` and ``max_copies``, and drops a copy only once
    no measurement in the last ``scale_down_delay_seconds`` needed it (the HPA's scale-down
    stabilization, for copies instead of pods), so a rate that wavers does not load and unload."""

    copies: int = Field(ge=1)
    max_copies: int | None = Field(default=None, ge=1)
    target_requests_per_second: float | None = Field(default=None, gt=0)
    """Requests per second one copy is meant to take (the rate summed over pods, divided by this,
    rounded up, is how many copies the load asks for)."""
    scale_down_delay_seconds: int = Field(default=300, ge=0)
    """How long the rate must have needed fewer copies before one goes (the HPA's default window)."""

    @property
    def scales(self) -> bool:
        """Whether the number of copies follows the request rate."""
        return (
            self.max_copies is not None
            and self.target_requests_per_second is not None
            and self.max_copies > self.copies
        )


Placement = PlacementMode | CopiesPlacement


class ModelSpec(CamelModel):
    name: str
    required: bool = True
    version_policy: VersionPolicy = Field(default_factory=VersionPolicy)
    config_override: dict[str, Any] | None = None
    rollout: ModelRollout = Field(default_factory=ModelRollout)
    mirror: Mirror | None = None
    placement: Placement = PlacementMode.ALL
    """Which pods hold the model: ``all``, ``{copies: k}`` or ``onDemand`` (docs/operator.md)."""

    @property
    def copies(self) -> int | None:
        """k for ``{copies: k}``; None for the other placements."""
        return self.placement.copies if isinstance(self.placement, CopiesPlacement) else None

    @property
    def on_demand(self) -> bool:
        return self.placement is PlacementMode.ON_DEMAND

    @property
    def scaling(self) -> CopiesPlacement | None:
        """The ``{copies, maxCopies, targetRequestsPerSecond}`` placement when copies follow the load."""
        placement = self.placement
        return placement if isinstance(placement, CopiesPlacement) and placement.scales else None


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
    frontend_workers: int | None = None
    """``naiad serve --frontend-workers``; unset: derived from the container's CPU (``reconcile.server``)."""
    min_residency_seconds: float | None = Field(default=None, ge=0)
    """``naiad serve --min-residency-secs``: how long a model loaded on demand stays before it may be
    evicted; unset: the server's default (30 s), which under heavy churn makes loads wait for a model to
    come of age (a short residency, 2 s, served the density benchmark's churn better)."""
    eviction_policy: Literal["lru", "gdsf"] | None = None
    """``naiad serve --eviction-policy``: which models placed onDemand a pod evicts first under its
    budget, the least recently used (``lru``) or the fewest requests x load seconds per MiB held
    (``gdsf``); unset: the server's default (``lru``)."""


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


class Evidence(CamelModel):
    """One version's traffic over a window, summed over the pods' own metrics: requests (successes
    and failures), errors, and latency of the successful ones (p99 from the latency histogram)."""

    requests: int = 0
    errors: int = 0
    error_rate: float | None = None
    p99_latency_ms: float | None = None
    mean_latency_ms: float | None = None


class StepVerdict(StrEnum):
    RUNNING = "Running"
    PASSED = "Passed"
    FAILED = "Failed"


class CanaryStep(CamelModel):
    """One canary step: the weight the new version had, when, and what its traffic showed."""

    weight: int
    started_at: str
    finished_at: str | None = None
    verdict: StepVerdict = StepVerdict.RUNNING
    evidence: Evidence | None = None
    share: float | None = None
    """The share of the model's requests the new version actually served in the window."""
    message: str | None = None


class CanaryPhase(StrEnum):
    PROGRESSING = "Progressing"
    PROMOTED = "Promoted"
    ABORTED = "Aborted"


class CanaryStatus(CamelModel):
    """The canary of one rollout (``target``: the content it rolls out), kept after it ended."""

    phase: CanaryPhase = CanaryPhase.PROGRESSING
    from_version: int
    to_version: int
    target: dict[int, str] = Field(default_factory=dict)
    step: int = 0
    steps: list[CanaryStep] = Field(default_factory=list)


class MirrorStatus(CamelModel):
    """The mirror version's traffic on the current pods (cumulative: since it was loaded there)."""

    version: int
    percent: int
    evidence: Evidence = Field(default_factory=Evidence)


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
    config_hash: str | None = None
    """Fingerprint of the ``configOverride`` every pod serves (None: no override)."""
    blocked_config: str | None = None
    """The override fingerprint of the blocked attempt: a different override is a new attempt."""
    blocked_spec: str | None = None
    """Fingerprint of the pod spec (resources, GPUs, placement) the blocked attempt ran on."""
    blocked_retry: str | None = None
    """The retry annotation's value when the attempt failed: bumping it retries."""
    retries: int = 0
    """Failed attempts at this target in a row (transient failures are retried with a back-off)."""
    next_retry: str | None = None
    """When a transient failure is tried again; None while no automatic retry is planned."""
    strategy: RolloutStrategy | None = None
    """The strategy of the rollout in progress or last done, as chosen (spec or measured footprint)."""
    copies: Copies = Field(default_factory=Copies)
    replicas: list[ReplicaState] = Field(default_factory=list)
    held_by: list[Holder] = Field(default_factory=list)
    """The pods that hold the model now (with ``placement: {copies: k}`` or ``onDemand``, some of them),
    at most ``replicaDetailLimit``."""
    requests_per_second: float | None = None
    """Requests (answered and failed) per second over the operator's last measuring window, summed over
    the pods' own counters; None until two measurements were taken."""
    target_copies: int | None = None
    """``{copies, maxCopies}``: how many copies the operator holds now, between the two."""
    copies_needed_at: str | None = None
    """The last time the request rate needed ``target_copies`` (None at the floor): a copy goes only
    ``scaleDownDelaySeconds`` after it. Status is the operator's memory, so this survives a restart."""
    last_failure: Failure | None = None
    canary: CanaryStatus | None = None
    mirror: MirrorStatus | None = None


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
