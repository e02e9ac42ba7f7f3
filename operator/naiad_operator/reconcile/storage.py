"""The repository's PersistentVolumeClaim.

``retentionPolicy`` is carried by the claim's ownerReference, as a StatefulSet's PVC retention policy
is: under ``Delete`` the claim is owned by the ModelRepository and garbage collection removes it with
the repository; under ``Retain`` it has no owner and stays. No finalizer is involved, so deleting a
repository never waits for the operator (an uninstalled operator cannot leave it Terminating). A claim
named in ``storage.claimName`` belongs to the user and is never created, owned or deleted.
"""

from __future__ import annotations

from typing import Any

from naiad_operator.api.modelrepository import ModelRepositorySpec, RetentionPolicy
from naiad_operator.reconcile import names


def owns_claim(spec: ModelRepositorySpec) -> bool:
    return not spec.storage.claim_name


def desired_claim(
    name: str, namespace: str, spec: ModelRepositorySpec, owner: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The PVC to create and keep in shape, or None when the user brings their own; ``owner`` (the
    repository's reference) is set on it only under ``retentionPolicy: Delete``."""
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
            names.claim_name(name, None),
            namespace,
            names.repository_labels(name),
            owner if spec.retention_policy is RetentionPolicy.DELETE else None,
        ),
        "spec": claim_spec,
    }
