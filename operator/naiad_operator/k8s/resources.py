"""URL paths of the kinds the operator touches (a fixed table: no discovery round-trips)."""

from __future__ import annotations

from naiad_operator import API_VERSION

PLURALS: dict[tuple[str, str], str] = {
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("v1", "PersistentVolume"): "persistentvolumes",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Service"): "services",
    ("v1", "Pod"): "pods",
    ("v1", "Event"): "events",
    ("apps/v1", "Deployment"): "deployments",
    ("batch/v1", "Job"): "jobs",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "horizontalpodautoscalers",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("coordination.k8s.io/v1", "Lease"): "leases",
    (API_VERSION, "ModelRepository"): "modelrepositories",
    (API_VERSION, "InferenceService"): "inferenceservices",
}


def collection_path(api_version: str, kind: str, namespace: str) -> str:
    """``namespace`` empty: a cluster-scoped kind (PersistentVolume)."""
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{prefix}{scope}/{PLURALS[(api_version, kind)]}"


def object_path(api_version: str, kind: str, namespace: str, name: str) -> str:
    return f"{collection_path(api_version, kind, namespace)}/{name}"
