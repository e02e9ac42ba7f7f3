"""``ModelRepository`` (``crds/modelrepositories.serving.naiad.dev.yaml``): spec, status and sync summary.

Defaults here equal the CRD's, because objects created before a default was added (or read from an API
server that does no defaulting, like the test emulator) must mean the same thing.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from pydantic import Field

from naiad_operator.api.base import CamelModel, Condition


class RetentionPolicy(StrEnum):
    RETAIN = "Retain"
    DELETE = "Delete"


class Verify(StrEnum):
    ETAG = "ETag"
    SHA256 = "SHA256"


class SecretRef(CamelModel):
    name: str


class KeyRef(CamelModel):
    """One key of a Secret (or ConfigMap), mounted as a file."""

    name: str
    key: str


class Credentials(CamelModel):
    """``secret_ref``'s keys become environment variables; ``gcs_key_secret`` is mounted as a file and
    named by ``GOOGLE_APPLICATION_CREDENTIALS`` (google-auth reads a path, not the key itself);
    ``service_account_name`` gives the pod a workload identity (IRSA, GKE Workload Identity), and may be
    combined with a Secret (e.g. an account for image pulls and a Secret for S3)."""

    secret_ref: SecretRef | None = None
    gcs_key_secret: KeyRef | None = None
    service_account_name: str | None = None


class AddressingStyle(StrEnum):
    AUTO = "auto"
    PATH = "path"
    VIRTUAL = "virtual"


class CABundle(CamelModel):
    """A PEM bundle for a private S3 (MinIO, Ceph) behind a private CA: from a Secret or a ConfigMap."""

    secret_ref: KeyRef | None = None
    config_map_ref: KeyRef | None = None


class Source(CamelModel):
    uri: str
    endpoint: str | None = None
    region: str | None = None
    addressing_style: AddressingStyle | None = None
    verify_tls: bool = Field(default=True, alias="verifyTLS")
    ca_bundle: CABundle | None = None
    credentials: Credentials = Field(default_factory=Credentials)

    def sync_uri(self) -> str:
        """The SOURCE argument of ``naiad repo sync``: Triton's ``s3://http://host:port/bucket/prefix``
        form carries a custom S3 endpoint inside the URI, so the Job needs no extra flag for it."""
        if self.endpoint and self.uri.startswith("s3://"):
            return f"s3://{self.endpoint.rstrip('/')}/{self.uri.removeprefix('s3://')}"
        return self.uri


class StorageMode(StrEnum):
    """Where server pods read the repository from (the decision table is in operator/README.md).

    ``perPod`` (the default) binds wherever a default StorageClass exists: the claim is mounted only by
    the sync Job (one pod at a time, so ReadWriteOnce block storage works), and every server pod copies
    the snapshot into its own volume in an init step. ``shared`` mounts the one claim read-only on every
    server pod, which needs ReadWriteMany storage when pods run on several nodes. ``nodeCache`` keeps
    one content-addressed copy per node (a node-local PersistentVolume the operator creates): the first
    server pod on a node syncs it, later pods there copy only what changed, and servers mount it
    read-only (see ``reconcile.nodecache``)."""

    SHARED = "shared"
    PER_POD = "perPod"
    NODE_CACHE = "nodeCache"


class Storage(CamelModel):
    mode: StorageMode = StorageMode.PER_POD
    claim_name: str | None = None
    size: str = "10Gi"
    storage_class_name: str | None = None
    access_modes: list[str] = Field(default_factory=lambda: ["ReadWriteOnce"])


class JobTemplate(CamelModel):
    """What a platform needs on the sync Job's pod: Istio-injected namespaces turn the sidecar off with
    an annotation (or the Job never completes), and placement/pull secrets as on any other pod."""

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    affinity: dict[str, Any] | None = None
    image_pull_secrets: list[dict[str, Any]] = Field(default_factory=list)
    priority_class_name: str | None = None
    volumes: list[dict[str, Any]] = Field(default_factory=list)
    volume_mounts: list[dict[str, Any]] = Field(default_factory=list)
    env: list[dict[str, Any]] = Field(default_factory=list)


class SyncPolicy(CamelModel):
    interval: str | None = None
    trigger: str | None = None
    keep_snapshots: int = 3
    verify: Verify = Verify.ETAG
    backoff_limit: int = 2
    active_deadline_seconds: int = 7200
    resources: dict[str, object] | None = None
    template: JobTemplate = Field(default_factory=JobTemplate)

    def interval_seconds(self) -> float | None:
        """``1h30m`` -> 5400.0; None when no interval is set (sync on change and trigger only)."""
        if not self.interval:
            return None
        match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", self.interval)
        if match is None:
            raise ValueError(f"sync.interval {self.interval!r} is not like 1h30m")
        hours, minutes, seconds = (int(g or 0) for g in match.groups())
        total = hours * 3600 + minutes * 60 + seconds
        return float(total) if total > 0 else None


class ModelRepositorySpec(CamelModel):
    source: Source
    storage: Storage = Field(default_factory=Storage)
    retention_policy: RetentionPolicy = RetentionPolicy.RETAIN
    sync: SyncPolicy = Field(default_factory=SyncPolicy)
    suspend: bool = False


class RepositoryPhase(StrEnum):
    PENDING = "Pending"
    SYNCING = "Syncing"
    READY = "Ready"
    DEGRADED = "Degraded"
    FAILED = "Failed"


class SyncResult(StrEnum):
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    NO_CHANGE = "NoChange"


class ModelVersionHash(CamelModel):
    version: int
    content_hash: str


class RepositoryModel(CamelModel):
    """One model of a snapshot, as consumers (InferenceServices) see it."""

    name: str
    versions: list[ModelVersionHash] = Field(default_factory=list)

    def hashes(self) -> dict[int, str]:
        return {v.version: v.content_hash for v in self.versions}


class SnapshotStatus(CamelModel):
    current: str | None = None
    available: list[str] = Field(default_factory=list)


class LastSync(CamelModel):
    job_name: str | None = None
    result: SyncResult | None = None
    snapshot: str | None = None
    start_time: str | None = None
    completion_time: str | None = None
    objects_listed: int | None = None
    objects_copied: int | None = None
    objects_reused: int | None = None
    bytes_copied: int | None = None
    duration_seconds: float | None = None
    message: str | None = None


class ModelRepositoryStatus(CamelModel):
    observed_generation: int | None = None
    phase: RepositoryPhase | None = None
    conditions: list[Condition] = Field(default_factory=list)
    claim_name: str | None = None
    snapshot: SnapshotStatus = Field(default_factory=SnapshotStatus)
    last_sync: LastSync | None = None
    active_job: str | None = None
    sync_count: int = 0
    synced_generation: int | None = None
    last_trigger: str | None = None
    next_sync_time: str | None = None
    model_count: int | None = None
    models: list[RepositoryModel] = Field(default_factory=list)
    models_complete: bool | None = None
    """False when ``models`` came from a termination message cut to 4 KiB (the listing ConfigMap could
    not be written): a model missing from it may well exist, so consumers must not call it Invalid."""
    sync_failures: int = 0
    """Failed syncs in a row: the exponent of the retry backoff (see ``syncjob.retry_delay``)."""

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def is_ready(self) -> bool:
        ready = self.condition("Ready")
        return ready is not None and ready.status == "True"


class SyncSummary(CamelModel):
    """The compact summary a sync Job writes to its listing ConfigMap and, cut to fit the kubelet's 4 KiB,
    as its termination message (see ``reconcile.syncjob`` and ``reconcile.listing``).

    ``naiad repo sync --json`` prints a richer document; the Job shrinks it, keeping what status needs:
    counts, the snapshot and per-version hashes.
    """

    result: SyncResult
    snapshot: str | None = None
    previous: str | None = None
    objects_listed: int = 0
    objects_copied: int = 0
    objects_reused: int = 0
    bytes_copied: int = 0
    duration_seconds: float = 0.0
    models: dict[str, dict[int, str]] = Field(default_factory=dict)
    error: str | None = None
    error_kind: str | None = None
    truncated: bool = False
    model_count: int | None = None
    """Models the sync found, all of them even where ``models`` was cut to fit."""
    listing: bool = False
    """The Job wrote the full summary to the listing ConfigMap (``reconcile.listing``)."""
    finished_at: str | None = None
