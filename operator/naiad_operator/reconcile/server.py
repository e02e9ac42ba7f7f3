"""The server Deployment and the ConfigMap holding its start-up model list.

Pods run ``naiad serve --model-control-mode=explicit --strict-readiness=true`` with one ``--load-model``
per model, so a new pod turns Ready only once its models are loaded (Triton's answer to "how does a new
replica get the same models", triton#3471), and ``--exit-on-error=false``: a pod whose model fails to
load stays up, unready, to report the failure in its index (the status shows each model's message)
rather than restart in a loop. The list lives in a ConfigMap read through an environment
variable and not in the pod template: changing models must not restart pods (the operator loads and
unloads them in place), yet a pod that starts later must start with the current list.
"""

from __future__ import annotations

import math
from typing import Any

from naiad_operator.api.inferenceservice import InferenceServiceSpec, InferenceServiceStatus, ServerSpec
from naiad_operator.api.observed import GATE
from naiad_operator.reconcile import names, placement, security
from naiad_operator.reconcile.repository_mount import RepositoryMount

HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
LOAD_MODELS_KEY = "load-model-args"
LOAD_MODELS_ENV = "NAIAD_LOAD_MODEL_ARGS"
GPU_RESOURCE = "nvidia.com/gpu"

#: ``$NAIAD_LOAD_MODEL_ARGS`` is deliberately unquoted: the shell splits it into one flag per model.
SERVE_SCRIPT = f'exec naiad serve "$@" ${LOAD_MODELS_ENV}'

#: Seconds a deleted pod keeps serving before it gets SIGTERM. Deleting a pod and removing it from the
#: Service's endpoints happen at the same time, and kube-proxies (and clients' connection pools) learn of
#: the removal up to seconds later: without the pause, the requests they still send find the listeners
#: closed (scale-in and rolling updates under traffic failed requests).
PRE_STOP_SECONDS = 5
#: naiad's own drain on SIGTERM (``--exit-timeout-secs``), after the pause, inside the grace period.
DRAIN_SECONDS = 30


def repository_path(spec: InferenceServiceSpec, mount: RepositoryMount) -> str:
    """Where the server reads models: the pinned snapshot, or ``current``, which each sync switches
    atomically, so loads after a sync read the new snapshot without a restart. A perPod copy holds
    exactly one snapshot, behind ``current``; a node's copy holds several, and another pod on the node
    may switch ``current``, so a nodeCache server reads its own snapshot's directory."""
    if mount.node_cache and mount.snapshot:
        return f"{names.REPOSITORY_MOUNT}/snapshots/{mount.snapshot.removeprefix('sha256:')}"
    if spec.repository.snapshot and not mount.per_pod:
        return f"{names.REPOSITORY_MOUNT}/snapshots/{spec.repository.snapshot.removeprefix('sha256:')}"
    return f"{names.REPOSITORY_MOUNT}/current"


def startup_models(spec: InferenceServiceSpec, status: InferenceServiceStatus) -> list[str]:
    """Models a new pod loads before it turns Ready.

    A model already rolled out (it has active versions) is included; one that never loaded anywhere is
    included only if required and not known to fail, because with strict readiness a model that fails
    at start keeps the pod from ever turning Ready, and optional models must never block a pod.
    """
    chosen: list[str] = []
    for model in spec.models:
        if model.on_demand or model.copies is not None:
            continue  # placed on some pods only: the operator loads it there once they are Ready
        record = status.model(model.name)
        if record is not None and record.active_versions:
            chosen.append(model.name)
        elif model.required and (record is None or not record.blocked_hashes):
            chosen.append(model.name)
    return chosen


def desired_models_configmap(
    name: str, namespace: str, owner: dict[str, Any], models: list[str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": names.child_metadata(
            names.models_configmap_name(name), namespace, names.server_labels(name), owner
        ),
        "data": {LOAD_MODELS_KEY: " ".join(f"--load-model={m}" for m in models)},
    }


#: How many frontend worker processes a server runs (see the server's docs/architecture.md).
FRONTEND_WORKERS_ENV = "NAIAD_FRONTEND_WORKERS"


def worker_count(spec: InferenceServiceSpec, platform_default: str = "") -> str | None:
    """``NAIAD_FRONTEND_WORKERS`` for the server container, first that applies: the service's own
    ``server.frontendWorkers``; the server's ``auto`` rule (none with at most 2 cores, else half of them,
    at most 16) applied to the container's CPU limit, else its request; the operator's platform-wide
    default; nothing (the server decides). The CPU must come from the spec: ``auto`` inside the pod counts
    the CPUs the process may be scheduled on, which a CPU limit (a cgroup quota) does not narrow, so a
    2-CPU pod on a 64-core node would start 16 workers that share 2 CPUs. A ``NAIAD_FRONTEND_WORKERS``
    in ``server.env`` (or ``--frontend-workers`` in ``server.args``) still wins over all of these."""
    if spec.server.frontend_workers is not None:
        return str(spec.server.frontend_workers)
    resources = spec.server.resources
    cpu = resources.limits.get("cpu") or resources.requests.get("cpu")
    cores = _cpu_cores(str(cpu)) if cpu else None
    if cores is not None:
        return str(0 if cores <= 2 else min(16, math.floor(cores) // 2))
    return platform_default or None


def residency_args(server: ServerSpec) -> list[str]:
    """``--min-residency-secs`` and ``--eviction-policy`` from ``server.minResidencySeconds`` and
    ``server.evictionPolicy`` (the CRD refuses each flag in ``server.args`` beside its field), none for a
    field unset (the pod's template stays as it was)."""
    args: list[str] = []
    if server.min_residency_seconds is not None:
        args.append(f"--min-residency-secs={server.min_residency_seconds:g}")
    if server.eviction_policy is not None:
        args.append(f"--eviction-policy={server.eviction_policy}")
    return args


def _cpu_cores(quantity: str) -> float | None:
    """``"4"`` -> 4.0, ``"2500m"`` -> 2.5; None for what is not a CPU quantity."""
    try:
        return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)
    except ValueError:
        return None


def desired_deployment(
    name: str,
    namespace: str,
    owner: dict[str, Any],
    spec: InferenceServiceSpec,
    mount: RepositoryMount,
    default_image: str,
    fixed_ids: bool = True,
    frontend_workers: str = "",
) -> dict[str, Any]:
    """``frontend_workers``: the platform's default ``NAIAD_FRONTEND_WORKERS`` (see
    :func:`worker_count` for what comes before it)."""
    server = spec.server
    image = server.image or default_image
    args = [
        f"--model-repository={repository_path(spec, mount)}",
        "--model-control-mode=explicit",
        "--strict-readiness=true",
        "--exit-on-error=false",
        f"--http-port={HTTP_PORT}",
        f"--grpc-port={GRPC_PORT}",
        f"--metrics-port={METRICS_PORT}",
        *placement.server_args(spec.models),
        *residency_args(server),
        *server.args,
    ]
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": "/tmp"},
        {
            "name": LOAD_MODELS_ENV,
            "valueFrom": {
                "configMapKeyRef": {"name": names.models_configmap_name(name), "key": LOAD_MODELS_KEY}
            },
        },
        *server.env,
    ]
    workers = worker_count(spec, frontend_workers)
    if workers is not None and not any(item.get("name") == FRONTEND_WORKERS_ENV for item in server.env):
        env.append({"name": FRONTEND_WORKERS_ENV, "value": workers})
    template = spec.pod_template
    mounts: list[dict[str, Any]] = [
        {"name": "repository", "mountPath": names.REPOSITORY_MOUNT, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[dict[str, Any]] = [mount.volume(), {"name": "tmp", "emptyDir": {}}]
    if placement.placed(spec.models):
        mounts.append({"name": placement.PEERS_VOLUME, "mountPath": placement.PEERS_MOUNT, "readOnly": True})
        volumes.append(placement.peers_volume(name))
    if template.shm_size:
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": template.shm_size}})
    container: dict[str, Any] = {
        "name": "server",
        "image": image,
        "imagePullPolicy": server.image_pull_policy,
        "command": ["/bin/sh", "-c", SERVE_SCRIPT, "naiad-serve"],
        "args": args,
        "env": env,
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "startupProbe": _probe(
            "/v2/health/ready", period=10, failures=max(1, math.ceil(server.startup_timeout_seconds / 10))
        ),
        "readinessProbe": _probe("/v2/health/ready", period=5, failures=2),
        "livenessProbe": _probe("/v2/health/live", period=10, failures=3),
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", f"sleep {PRE_STOP_SECONDS}"]}}},
        "volumeMounts": [*mounts, *server.volume_mounts],
        # a server that dies at start leaves its last log lines as the message status shows
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": server.security_context or security.container(),
    }
    if server.env_from:
        container["envFrom"] = list(server.env_from)
    resources = _resources(spec)
    if resources:
        container["resources"] = resources
    pull, pull_volumes = mount.init_containers(image, server.image_pull_policy)
    labels = {**template.labels, **names.server_labels(name)}
    pod_spec: dict[str, Any] = {
        "securityContext": template.security_context or security.pod(fixed_ids),
        "containers": [container, *template.containers],
        "volumes": [*volumes, *pull_volumes, *template.volumes],
        "terminationGracePeriodSeconds": PRE_STOP_SECONDS + DRAIN_SECONDS + 5,
        # Ready only once the operator loaded what the fleet serves (override, pin): reconcile.readiness
        "readinessGates": [{"conditionType": GATE}],
    }
    if pull or template.init_containers:
        pod_spec["initContainers"] = [*pull, *template.init_containers]
    optional: dict[str, Any] = {
        "nodeSelector": dict(template.node_selector),
        "tolerations": list(template.tolerations),
        "affinity": template.affinity,
        "topologySpreadConstraints": list(template.topology_spread_constraints),
        "serviceAccountName": template.service_account_name or mount.service_account(),
        "priorityClassName": template.priority_class_name,
        "imagePullSecrets": list(template.image_pull_secrets),
        "runtimeClassName": template.runtime_class_name,
        "schedulerName": template.scheduler_name,
    }
    pod_spec.update({k: v for k, v in optional.items() if v})
    pod_meta: dict[str, Any] = {"labels": labels}
    annotations = {**template.annotations, **mount.annotations()}
    if annotations:
        pod_meta["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": names.child_metadata(
            names.server_name(name), namespace, names.server_labels(name), owner
        ),
        "spec": {
            # No pod before the repository's first snapshot: a server started while the first sync
            # was still writing found no models and sat unready until its startup probe gave up.
            "replicas": spec.replicas if mount.snapshot else 0,
            "selector": {"matchLabels": names.selector_labels(name)},
            "progressDeadlineSeconds": spec.rollout.progress_deadline_seconds,
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {
                    "maxSurge": spec.rollout.max_surge,
                    "maxUnavailable": spec.rollout.max_unavailable,
                },
            },
            "template": {"metadata": pod_meta, "spec": pod_spec},
        },
    }


def _probe(path: str, *, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 5,
    }


def _resources(spec: InferenceServiceSpec) -> dict[str, Any]:
    requests = dict(spec.server.resources.requests)
    limits = dict(spec.server.resources.limits)
    if spec.server.gpus:
        requests[GPU_RESOURCE] = spec.server.gpus
        limits[GPU_RESOURCE] = spec.server.gpus
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return resources
