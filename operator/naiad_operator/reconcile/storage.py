"""The repository's PersistentVolumeClaim.

The claim carries no ownerReference on purpose: garbage collection would delete it with the
ModelRepository whatever ``retentionPolicy`` says. The finalizer deletes it instead, and only under
``Delete``; a claim named in ``storage.claimName`` belongs to the user and is never created or deleted.
"""

from __future__ import annotations

from typing import Any

from naiad_operator.api.modelrepository import ModelRepositorySpec
from naiad_operator.reconcile import names


def owns_claim(spec: ModelRepositorySpec) -> bool:
    return not spec.storage.claim_name


def desired_claim(name: str, namespace: str, spec: ModelRepositorySpec) -> dict[str, Any] | None:
    """The PVC to create and keep in shape, or None when the user brings their own."""
    if not owns_claim(spec):
        return None
    storage = spec.storage
    claim_spec: dict[str, Any] = {
        "accessModes": list(storage.access_modes),
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name:
        claim_spec["storageClassName"] = storage.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": names.child_metadata(
            names.claim_name(name, None), namespace, names.repository_labels(name), None
        ),
        "spec": claim_spec,
    }
