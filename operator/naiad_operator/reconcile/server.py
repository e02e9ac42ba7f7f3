"""The server Deployment and the ConfigMap holding its start-up model list.

Pods run ``naiad serve --model-control-mode=explicit --strict-readiness=true`` with one ``--load-model``
per model, so a new pod turns Ready only once its models are loaded (Triton's answer to "how does a new
replica get the same models", triton#3471). The list lives in a ConfigMap read through an environment
variable and not in the pod template: changing models must not restart pods (the operator loads and
unloads them in place), yet a pod that starts later must start with the current list.
"""

from __future__ import annotations

import math
from typing import Any

from naiad_operator.api.inferenceservice import InferenceServiceSpec, InferenceServiceStatus
from naiad_operator.reconcile import names, security

HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
LOAD_MODELS_KEY = "load-model-args"
LOAD_MODELS_ENV = "NAIAD_LOAD_MODEL_ARGS"
GPU_RESOURCE = "nvidia.com/gpu"

#: ``$NAIAD_LOAD_MODEL_ARGS`` is deliberately unquoted: the shell splits it into one flag per model.
SERVE_SCRIPT = f'exec naiad serve "$@" ${LOAD_MODELS_ENV}'


def repository_path(spec: InferenceServiceSpec) -> str:
    """Where the server reads models: the pinned snapshot, or ``current``, which each sync switches
    atomically, so loads after a sync read the new snapshot without a restart."""
    if spec.repository.snapshot:
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


def desired_deployment(
    name: str,
    namespace: str,
    owner: dict[str, Any],
    spec: InferenceServiceSpec,
    claim: str,
    default_image: str,
) -> dict[str, Any]:
    server = spec.server
    args = [
        f"--model-repository={repository_path(spec)}",
        "--model-control-mode=explicit",
        "--strict-readiness=true",
        f"--http-port={HTTP_PORT}",
        f"--grpc-port={GRPC_PORT}",
        f"--metrics-port={METRICS_PORT}",
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
    container: dict[str, Any] = {
        "name": "server",
        "image": server.image or default_image,
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
        "volumeMounts": [
            {"name": "repository", "mountPath": names.REPOSITORY_MOUNT, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": security.container(),
    }
    resources = _resources(spec)
    if resources:
        container["resources"] = resources
    template = spec.pod_template
    labels = {**template.labels, **names.server_labels(name)}
    pod_spec: dict[str, Any] = {
        "securityContext": security.pod(),
        "containers": [container],
        "volumes": [
            {"name": "repository", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    if template.node_selector:
        pod_spec["nodeSelector"] = dict(template.node_selector)
    if template.tolerations:
        pod_spec["tolerations"] = list(template.tolerations)
    if template.affinity:
        pod_spec["affinity"] = template.affinity
    if template.service_account_name:
        pod_spec["serviceAccountName"] = template.service_account_name
    if template.priority_class_name:
        pod_spec["priorityClassName"] = template.priority_class_name
    pod_meta: dict[str, Any] = {"labels": labels}
    if template.annotations:
        pod_meta["annotations"] = dict(template.annotations)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": names.child_metadata(
            names.server_name(name), namespace, names.server_labels(name), owner
        ),
        "spec": {
            "replicas": spec.replicas,
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
