"""The Lease the operator's replicas elect a leader with: read it, create it, or rewrite its spec only if
nobody wrote it since we read it (a JSON patch whose first operation tests ``resourceVersion``)."""

from __future__ import annotations

from typing import Any

from naiad_operator.k8s.client import Kube
from naiad_operator.k8s.errors import ConflictError, InvalidError

API_VERSION, KIND = "coordination.k8s.io/v1", "Lease"


async def read(kube: Kube, namespace: str, name: str) -> tuple[dict[str, Any], str] | None:
    """The Lease's spec and resourceVersion, or None when there is no Lease yet."""
    lease = await kube.get(API_VERSION, KIND, namespace, name)
    if lease is None:
        return None
    return dict(lease.get("spec") or {}), str(lease["metadata"].get("resourceVersion") or "")


async def create(kube: Kube, namespace: str, name: str, spec: dict[str, Any]) -> bool:
    """False when another replica created it first."""
    body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name, "namespace": namespace}}
    try:
        await kube.create({**body, "spec": spec})
    except ConflictError:
        return False
    return True


async def write_if_unchanged(
    kube: Kube, namespace: str, name: str, resource_version: str, spec: dict[str, Any]
) -> bool:
    """False when the Lease changed since it was read (another replica renewed or took it)."""
    operations: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
        {"op": "replace", "path": "/spec", "value": spec},
    ]
    try:
        await kube.json_patch(API_VERSION, KIND, namespace, name, operations)
    except (ConflictError, InvalidError):
        return False
    return True
