"""A sync's full model listing, carried in a ConfigMap the sync Job writes, and the rights to write it.

The termination message is capped at 4 KiB by the kubelet: about 80 single-version models. Past that cut
the listing used to lose models, and every InferenceService naming one of them called it InvalidSpec.
Where the full listing goes instead, and why this place:

- a file on the claim: the operator would have to mount every repository's claim, and a ReadWriteOnce
  claim is attached to one node at a time (the sync Job's or a server's);
- the Job's log (``pods/log``): gone with the pod (``ttlSecondsAfterFinished``, node loss), so a Job that
  finished while the operator was down could not be read, and log rotation may cut a large document;
- more termination messages: a pod's are capped at 12 KiB in all;
- **a ConfigMap** (chosen): up to 1 MiB; the listing is the compact summary (16-hex-digit hashes)
  gzipped, about 30 bytes per model version once base64-encoded, so some 30,000 versions fit. It is
  owned by the ModelRepository, not the Job, so it outlives the Job: a sync that finished while the
  operator was down is read from it, with its real outcome, instead of being recorded as failed.

Least privilege: the operator creates the (empty) ConfigMap itself and a Role that allows only ``get`` and
``patch`` of that one name, bound to the Job's ServiceAccount: ``credentials.serviceAccountName`` when the
repository names one (IRSA, Workload Identity), else a ``<repository>-sync`` account the operator makes,
so no other pod of the namespace gets the right. A Job that cannot write the ConfigMap (RBAC refused,
API unreachable, a listing over the size limit) still succeeds: its termination message is used, the
repository's status says the listing is incomplete, and models it does not list are "not known yet" to
InferenceServices, never Invalid.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
from typing import Any

from pydantic import ValidationError

from naiad_operator.api.modelrepository import ModelRepositorySpec, SyncSummary
from naiad_operator.reconcile import names

#: The ConfigMap key the Job writes: ``{"job": <Job name>, "summary": <SyncSummary JSON>}``, gzipped.
LISTING_KEY = "listing.json.gz"
#: Largest base64 text the Job writes; a ConfigMap holds 1 MiB in all.
LISTING_LIMIT = 900_000
#: Environment of the sync container: which ConfigMap to write, and which Job it speaks for.
CONFIGMAP_ENV = "NAIAD_LISTING_CONFIGMAP"
JOB_ENV = "NAIAD_SYNC_JOB"
#: Where the kubelet mounts the pod's ServiceAccount token, CA and namespace.
ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def configmap_name(repository: str) -> str:
    return names.dns_name(repository, "listing")


def role_name(repository: str) -> str:
    return names.dns_name(repository, "listing-writer")


def job_account(repository: str, spec: ModelRepositorySpec) -> str:
    """The sync Job's ServiceAccount: the repository's own (workload identity), else one we make."""
    return spec.source.credentials.service_account_name or names.dns_name(repository, "sync")


def desired_objects(
    repository: str, namespace: str, owner: dict[str, Any], spec: ModelRepositorySpec
) -> list[dict[str, Any]]:
    """The ConfigMap (created empty: the Role cannot grant ``create`` of one name), the Role, its
    binding and, when the repository names no account, the Job's own ServiceAccount."""
    labels = names.repository_labels(repository)
    cm = configmap_name(repository)
    account = job_account(repository, spec)
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": names.child_metadata(cm, namespace, labels, owner),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": names.child_metadata(role_name(repository), namespace, labels, owner),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": [cm],
                    "verbs": ["get", "patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": names.child_metadata(role_name(repository), namespace, labels, owner),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": role_name(repository),
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    ]
    if not spec.source.credentials.service_account_name:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": names.child_metadata(account, namespace, labels, owner),
            }
        )
    return objects


def read(configmap: dict[str, Any] | None, job: str) -> SyncSummary | None:
    """The summary ``job`` wrote into the ConfigMap; None when it wrote none (yet), or another Job's
    listing is there (an earlier sync's: never taken for this one's)."""
    blob = ((configmap or {}).get("binaryData") or {}).get(LISTING_KEY)
    if not blob:
        return None
    try:
        document = json.loads(gzip.decompress(base64.b64decode(blob)))
    except (binascii.Error, OSError, EOFError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("job") != job:
        return None
    try:
        return SyncSummary.model_validate(document.get("summary"))
    except ValidationError:
        return None


def best(message: SyncSummary | None, listed: SyncSummary | None) -> SyncSummary | None:
    """The listing when the Job wrote one (it is complete), else the termination message's summary."""
    return listed if listed is not None else message
