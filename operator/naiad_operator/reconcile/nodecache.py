"""``storage.mode: nodeCache``: one content-addressed copy of the repository per node, as KServe's
LocalModelCache keeps one.

Server pods must stay within the ``restricted`` Pod Security level, which refuses ``hostPath`` volumes,
so the node's directory reaches them the way LocalModelCache's does: as a PersistentVolumeClaim bound
to a PersistentVolume of type ``local`` that the operator creates (pods only name the claim). A
``local`` volume is the same path on whichever node the pod lands on, so one volume per repository,
whose node affinity admits every node, gives each node its own copy; the servers' own placement picks
the nodes. ``local`` volumes are not attached, so ReadWriteOnce does not stop pods on several nodes.

Each server pod's init step runs ``naiad repo sync`` into its node's copy: blobs are keyed by content
hash and snapshots are hard links to them, so the first pod on a node copies the snapshot, later pods
there (and later snapshots) copy only the files that changed. The server reads the immutable snapshot
directory, never ``current``, so pods of two snapshots can share a node during a rollout.

The volume is cluster-scoped and cannot be owned by a namespaced repository: deleting the repository
deletes the claim (owned), and the volume turns ``Released`` with its node directories left in place.
"""

from __future__ import annotations

from typing import Any

from naiad_operator import GROUP
from naiad_operator.api.modelrepository import ModelRepositorySpec
from naiad_operator.reconcile import names

#: A class no provisioner serves: the claim binds only to the volume named in it, never to a
#: dynamically provisioned one, and no default StorageClass steps in.
STORAGE_CLASS = "naiad-node-cache"
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: On the cluster-scoped volume: whose it is (``kubectl delete pv -l`` after deleting a repository).
NAMESPACE_LABEL = f"{GROUP}/namespace"


def claim_name(repository: str) -> str:
    return names.dns_name(repository, "node-cache")


def volume_name(namespace: str, repository: str) -> str:
    """Cluster-wide, so the namespace is part of it."""
    return names.dns_name("naiad", namespace, repository, "node-cache", limit=253)


def node_path(root: str, namespace: str, repository: str) -> str:
    return f"{root.rstrip('/')}/{namespace}/{repository}"


def desired_volume(root: str, namespace: str, repository: str, spec: ModelRepositorySpec) -> dict[str, Any]:
    """The ``local`` PersistentVolume, reserved for the repository's node-cache claim (``claimRef``)."""
    labels = {**names.repository_labels(repository), NAMESPACE_LABEL: namespace}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name(namespace, repository), "labels": labels},
        "spec": {
            "capacity": {"storage": spec.storage.size},
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Filesystem",
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": STORAGE_CLASS,
            "local": {"path": node_path(root, namespace, repository)},
            "claimRef": {"namespace": namespace, "name": claim_name(repository)},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "Exists"}]}
                    ]
                }
            },
        },
    }


def desired_claim(
    namespace: str, repository: str, spec: ModelRepositorySpec, owner: dict[str, Any]
) -> dict[str, Any]:
    """The claim server pods mount; owned by the repository (it is only a handle on the volume)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": names.child_metadata(
            claim_name(repository), namespace, names.repository_labels(repository), owner
        ),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": STORAGE_CLASS,
            "volumeName": volume_name(namespace, repository),
            "resources": {"requests": {"storage": spec.storage.size}},
        },
    }
