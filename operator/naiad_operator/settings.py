"""Operator settings, read once from ``NAIAD_OPERATOR_*`` environment variables.

The operator runs as one Deployment whose only configuration surface is its environment (the Helm chart's
``env:`` uses the same names), so every knob is a typed field here with its unit, default and reason.
Nothing else in the package reads the environment.
"""

from __future__ import annotations

import functools

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class OperatorSettings(BaseSettings):
    """Every field is ``NAIAD_OPERATOR_<FIELD>`` in the environment, e.g.
    ``NAIAD_OPERATOR_NAMESPACES='["ml","prod"]'``."""

    model_config = SettingsConfigDict(env_prefix="NAIAD_OPERATOR_", frozen=True)

    namespaces: list[str] = Field(default_factory=list)
    """Namespaces to watch, as a JSON list (``["ml","prod"]``); empty watches the whole cluster, which needs a
    ClusterRole. A namespaced install lists exactly its namespaces so a Role is enough."""

    server_image: str = "naiad/server:latest"
    """Image for server pods and sync Jobs when an InferenceService names none: the sync Job runs
    ``naiad repo sync`` from the same image so the tool and the server agree on the snapshot layout."""

    reconcile_interval: float = 30.0
    """Seconds between level-triggered passes (timers) over every resource. Each pass re-reads every
    server pod's repository index and corrects drift (a restarted pod, a model unloaded by hand); in
    steady state it writes nothing to the Kubernetes API."""

    sync_poll_interval: float = 10.0
    """Seconds between checks of a running sync Job. Short, because a finished Job is what turns a new
    snapshot into a rollout."""

    server_timeout: float = 10.0
    """Seconds for one repository-index or unload call to a server pod: a pod that does not answer in
    this time is counted as not reporting, not as failed."""

    load_timeout: float = 600.0
    """Seconds one model load may take on one pod before it counts as failed (and the rollout rolls
    back). Large models take minutes to load, so this is generous."""

    endpoint_drain_seconds: float = 5.0
    """Seconds a ``perPod`` rollout waits after taking a pod out of the Service's endpoints before it
    unloads there: kube-proxies and clients' connection pools learn of the removal with a lag (the same
    reason server pods sleep in ``preStop``)."""

    replica_detail_limit: int = 10
    """Most per-pod entries kept in ``status.models[].replicas`` (not-ready pods first): status stays
    small with hundreds of pods, and the counts still cover every pod."""

    field_manager: str = "naiad-operator"
    """Server-side-apply field manager and the name the operator signs Events with."""

    api_retries: int = 5
    """Attempts for one Kubernetes API write on a conflict (409), throttling (429) or a 5xx before the
    handler fails and kopf retries it later. Conflicts are retried after a re-read, never ignored."""

    sync_retry_seconds: float = 30.0
    """Seconds before the first retry of a failed sync (when the interval does not come sooner): a
    bucket that was missing or credentials that were wrong are often fixed without a spec change. Each
    further failure in a row doubles it, up to ``sync_retry_max_seconds``, with jitter."""

    sync_retry_max_seconds: float = 900.0
    """The longest delay between retries of a sync that keeps failing."""

    metrics_port: int = 8081
    """Port of the operator's own Prometheus ``/metrics`` (0: none). kopf's liveness endpoint keeps
    8080."""

    server_frontend_workers: str = ""
    """``NAIAD_FRONTEND_WORKERS`` of every server pod (a count, or ``auto``; empty: the server's own
    default, ``auto``). An InferenceService's ``server.env`` can still set it for one service."""

    fixed_user_ids: bool = True
    """Run server pods and sync Jobs as UID/GID/fsGroup 1000 (the images' user). Set false under
    OpenShift's ``restricted-v2``, which assigns them from the namespace's range and refuses fixed ones.
    A ``podTemplate.securityContext`` replaces the pod-level context altogether."""

    leader_election: bool = False
    """Act only while holding a ``coordination.k8s.io`` Lease, so several replicas can run (one acts, the
    others wait and take over within ``leader_lease_seconds`` when it dies). Off: the one replica acts
    without a Lease (and needs no RBAC on leases)."""

    leader_lease_name: str = "naiad-operator"
    """Name of the Lease the replicas share."""

    leader_namespace: str = ""
    """Namespace of the Lease: the operator's own (the chart sets it); empty: the first watched
    namespace, or ``default``."""

    leader_identity: str = ""
    """This replica's name in the Lease; empty: its hostname, which in a pod is the pod's name."""

    leader_lease_seconds: float = 15.0
    """How long a Lease not renewed stays with its holder: a dead leader is replaced after at most this."""

    leader_renew_seconds: float = 2.0
    """How often the leader renews and a standby retries."""

    sync_job_ttl_seconds: int = 3600
    """``ttlSecondsAfterFinished`` of sync Jobs: long enough to read their summary and inspect a failure,
    short enough that Jobs do not pile up with an interval sync."""

    node_cache_path: str = "/var/lib/naiad/node-cache"
    """Root of the ``storage.mode: nodeCache`` copies on every node (``<root>/<namespace>/<repository>``,
    a ``local`` PersistentVolume per repository). A platform setting, never a repository's: a path a
    tenant could choose would be a hostPath by proxy. Each directory must exist on the nodes, writable
    by the pods' fsGroup (operator/README.md, "nodeCache")."""


@functools.cache
def load() -> OperatorSettings:
    """The settings, read from the environment once per process (timer intervals are fixed when the
    handlers are registered, so everything reads the same instance)."""
    return OperatorSettings()
