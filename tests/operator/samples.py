"""Sample custom resources used across the operator tests: one minimal and one with every field."""

from __future__ import annotations

from typing import Any

NAMESPACE = "ml"
OWNER_META = {"name": "vision", "namespace": NAMESPACE, "uid": "0b0e6c1e-1111-4222-8333-444455556666"}


def repository(name: str = "models", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "serving.naiad.dev/v1alpha1",
        "kind": "ModelRepository",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"source": {"uri": "s3://bucket/triton"}, **spec},
    }


FULL_REPOSITORY_SPEC: dict[str, Any] = {
    "source": {
        "uri": "s3://bucket/triton",
        "endpoint": "https://minio.ml:9000",
        "region": "eu-west-1",
        "addressingStyle": "path",
        "verifyTLS": True,
        "caBundle": {"secretRef": {"name": "minio-ca", "key": "ca.crt"}},
        "credentials": {
            "secretRef": {"name": "s3-creds"},
            "gcsKeySecret": {"name": "gcs-key", "key": "key.json"},
            "serviceAccountName": "repo-reader",
        },
    },
    "storage": {
        "mode": "shared",
        "size": "50Gi",
        "storageClassName": "rwx-fast",
        "accessModes": ["ReadWriteMany"],
    },
    "retentionPolicy": "Delete",
    "sync": {
        "interval": "10m",
        "trigger": "ci-1",
        "keepSnapshots": 5,
        "verify": "SHA256",
        "backoffLimit": 1,
        "activeDeadlineSeconds": 600,
        "resources": {"limits": {"memory": "1Gi"}},
        "template": {
            "labels": {"team": "vision"},
            "annotations": {"sidecar.istio.io/inject": "false"},
            "nodeSelector": {"pool": "gpu"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "imagePullSecrets": [{"name": "registry"}],
            "priorityClassName": "batch",
            "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
        },
    },
}


def inference_service(name: str = "vision", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "serving.naiad.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"repository": {"name": "models"}, "models": [{"name": "resnet"}], **spec},
    }


FULL_SERVICE_SPEC: dict[str, Any] = {
    "repository": {"name": "models"},
    "models": [
        {
            "name": "resnet",
            "versionPolicy": {"latest": {"numVersions": 2}},
            "configOverride": {"max_batch_size": 8},
        },
        {"name": "bert", "required": False, "versionPolicy": {"specific": {"versions": [3]}}},
    ],
    "server": {
        "image": "registry.example/naiad:1.0",
        "args": ["--log-verbose=1"],
        "env": [{"name": "OMP_NUM_THREADS", "value": "4"}],
        "envFrom": [{"secretRef": {"name": "hf-token"}}],
        "volumeMounts": [{"name": "nvme", "mountPath": "/cache"}],
        "gpus": 1,
        "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi"}},
        "startupTimeoutSeconds": 900,
    },
    "podTemplate": {
        "labels": {"team": "vision"},
        "annotations": {"prometheus.io/scrape": "true"},
        "nodeSelector": {"gpu": "a100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "serviceAccountName": "servers",
        "priorityClassName": "inference",
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
        "imagePullSecrets": [{"name": "registry"}],
        "runtimeClassName": "nvidia",
        "schedulerName": "volcano",
        "shmSize": "2Gi",
        "volumes": [{"name": "nvme", "hostPath": {"path": "/mnt/nvme"}}],
        "initContainers": [{"name": "warmup", "image": "busybox", "restartPolicy": "Always"}],
        "containers": [{"name": "log-shipper", "image": "fluent-bit"}],
    },
    "replicas": 3,
    "autoscaling": {
        "minReplicas": 2,
        "maxReplicas": 8,
        "metric": "QueueTime",
        "targetQueueTimeMicroseconds": 20000,
    },
    "disruption": {"minAvailable": 2},
    "rollout": {"maxSurge": 1, "maxUnavailable": 0, "progressDeadlineSeconds": 1200},
}
