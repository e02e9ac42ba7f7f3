"""Bring child objects in line with their desired form: write what differs, delete what must go."""

from __future__ import annotations

from typing import Any

from naiad_operator.k8s.cache import Cache
from naiad_operator.reconcile.children import ChildRef
from naiad_operator.reconcile.compare import needs_apply
from naiad_operator.reconcile.names import MANAGED_BY


async def ensure(cache: Cache, desired: dict[str, Any]) -> dict[str, Any]:
    """The child as the API server holds it after this call; written only when it drifted. What it
    holds now comes from the watches (a live read only for what they have not delivered)."""
    meta = desired["metadata"]
    namespace = meta.get("namespace", "")  # none: a cluster-scoped kind (PersistentVolume)
    observed = await cache.get(desired["apiVersion"], desired["kind"], namespace, meta["name"])
    if not needs_apply(desired, observed):
        assert observed is not None
        return observed
    return await cache.kube.apply(desired)


async def remove(cache: Cache, namespace: str, ref: ChildRef) -> bool:
    """Delete a child we made that is no longer wanted; objects someone else made are left alone."""
    observed = await cache.get(ref.api_version, ref.kind, namespace, ref.name)
    labels = ((observed or {}).get("metadata") or {}).get("labels") or {}
    if observed is None or labels.get("app.kubernetes.io/managed-by") != MANAGED_BY:
        return False
    return await cache.kube.delete(ref.api_version, ref.kind, namespace, ref.name)
