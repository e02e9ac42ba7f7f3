"""Child object names, labels and owner references.

Names are derived, never stored: the operator finds its children again after a restart by computing the
same names. Kubernetes limits Service names and label values to 63 characters, so long names are cut
and made unique again with a short hash of the full name.
"""

from __future__ import annotations

import hashlib
from typing import Any

from naiad_operator import API_VERSION, GROUP

MANAGED_BY = "naiad-operator"
ISVC_LABEL = f"{GROUP}/inferenceservice"
REPO_LABEL = f"{GROUP}/modelrepository"
ROLE_LABEL = f"{GROUP}/role"
HASH_ANNOTATION = f"{GROUP}/desired-hash"

#: Where server pods and sync Jobs mount the repository PVC.
REPOSITORY_MOUNT = "/repository"


def dns_name(*parts: str, limit: int = 63) -> str:
    """``-``.join(parts), cut to ``limit`` with a hash suffix when longer, so it stays unique."""
    name = "-".join(p for p in parts if p)
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-')}-{digest}"


def claim_name(repository: str, explicit: str | None) -> str:
    return explicit or dns_name(repository, "repository")


def sync_job_name(repository: str, count: int) -> str:
    return dns_name(repository, "sync", str(count))


def server_name(isvc: str) -> str:
    """Deployment, Service, HPA and PDB share the InferenceService's name (each kind its own space)."""
    return dns_name(isvc)


def models_configmap_name(isvc: str) -> str:
    return dns_name(isvc, "models")


def selector_labels(isvc: str) -> dict[str, str]:
    """The one immutable label a Deployment selects its pods by."""
    return {ISVC_LABEL: dns_name(isvc)}


def selector_string(isvc: str) -> str:
    """``status.selector`` for the scale subresource (what an HPA lists pods by)."""
    return ",".join(f"{k}={v}" for k, v in selector_labels(isvc).items())


def server_labels(isvc: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "naiad-server",
        "app.kubernetes.io/instance": dns_name(isvc),
        "app.kubernetes.io/managed-by": MANAGED_BY,
        **selector_labels(isvc),
    }


def repository_labels(repository: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "naiad-repository",
        "app.kubernetes.io/instance": dns_name(repository),
        "app.kubernetes.io/managed-by": MANAGED_BY,
        REPO_LABEL: dns_name(repository),
    }


def owner_reference(kind: str, meta: dict[str, Any]) -> dict[str, Any]:
    """A controller reference to one of our custom resources, so deleting it cascades to children."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def child_metadata(
    name: str, namespace: str, labels: dict[str, str], owner: dict[str, Any] | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return meta
