"""How server pods get the repository, per ``ModelRepository.spec.storage.mode``.

``shared``: the repository claim itself, mounted read-only by every pod (one copy; needs ReadWriteMany
storage when pods run on several nodes). ``perPod``: the claim stays with the sync Job, and each pod's
init step syncs the InferenceService's snapshot from the source into the pod's own volume, so nothing
but the Job ever mounts the claim and ReadWriteOnce block storage works with pods on any node.

``nodeCache``: the node-cache claim (``reconcile.nodecache``), mounted read-write by the init step, which
syncs the service's snapshot into the node's content-addressed copy (changed files only), and read-only
by the server, which reads that snapshot's immutable directory.

A perPod (or nodeCache) pod holds the snapshot it started with: a new snapshot changes the pod template
(the expected snapshot is part of it), and the Deployment replaces the pods under the rollout's maxSurge and
maxUnavailable. Model loads and unloads in place act only on pods that already hold the target snapshot,
so the operator never asks an old pod to load a version its copy does not have.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from naiad_operator.api.inferenceservice import ModelStatus
from naiad_operator.api.modelrepository import ModelRepositorySpec, StorageMode
from naiad_operator.api.observed import SNAPSHOT_ANNOTATION, PodObservation
from naiad_operator.reconcile import names, security, source

EXPECTED_SNAPSHOT_ENV = "NAIAD_EXPECTED_SNAPSHOT"
TERMINATION_LOG = "/dev/termination-log"

#: The init step's check (argv: the --json summary, its stderr, the expected snapshot id): prints one
#: line for the termination message, and fails when the sync failed or brought another snapshot.
CHECK_PULL = r"""
import json, sys
try:
    with open(sys.argv[1]) as f:
        doc = json.load(f)
except Exception:
    with open(sys.argv[2], errors="replace") as f:
        tail = " ".join(f.read().strip().splitlines()[-5:])
    print("SyncFailed: " + (tail or "naiad repo sync printed no summary"))
    sys.exit(1)
if doc.get("result") == "Failed":
    error = doc.get("error") or {}
    print("SyncFailed: %s: %s" % (error.get("kind", "error"), error.get("message", "")))
    sys.exit(1)
got, want = (doc.get("snapshot") or {}).get("id"), sys.argv[3]
if want and got != want:
    print("SnapshotMismatch: the source changed since %s was synced (this pod got %s); "
          "the repository's next sync rolls the service forward" % (want, got))
    sys.exit(1)
print("Pulled %s: %s bytes copied" % (got, (doc.get("bytes") or {}).get("copied", 0)))
"""

#: ``nodeCache``: pods starting together on one node take turns (exit status 7: another sync holds the
#: copy); the later ones then find the files there and copy nothing.
TAKE_TURNS = (
    'until naiad repo sync "$@" --json > /tmp/pull.json 2> /tmp/pull.err; [ "$?" -ne 7 ]; do sleep 1; done\n'
)

PULL_SCRIPT = (
    'naiad repo sync "$@" --json > /tmp/pull.json 2> /tmp/pull.err\n'
    f'python3 -c "$NAIAD_CHECK_PULL" /tmp/pull.json /tmp/pull.err "${EXPECTED_SNAPSHOT_ENV}"'
    f" > {TERMINATION_LOG}\n"
    "status=$?\n"
    f"cat {TERMINATION_LOG}\n"
    'exit "$status"\n'
)


@dataclass(frozen=True, slots=True)
class RepositoryMount:
    """What an InferenceService's pods mount: the claim (``shared``), or a copy of ``snapshot`` pulled
    by an init step (``perPod``, which needs the repository's spec for the source and credentials)."""

    claim: str
    mode: StorageMode = StorageMode.SHARED
    repository: ModelRepositorySpec | None = None
    snapshot: str | None = None

    @property
    def per_pod(self) -> bool:
        """The pod pulls its snapshot in an init step (``perPod`` and ``nodeCache``)."""
        return self.mode in (StorageMode.PER_POD, StorageMode.NODE_CACHE) and self.repository is not None

    @property
    def node_cache(self) -> bool:
        return self.mode is StorageMode.NODE_CACHE and self.repository is not None

    def volume(self) -> dict[str, Any]:
        if self.node_cache:  # the init step writes the node's copy; the server's mount is read-only
            return {"name": "repository", "persistentVolumeClaim": {"claimName": self.claim}}
        if self.per_pod:
            assert self.repository is not None
            return {"name": "repository", "emptyDir": {"sizeLimit": self.repository.storage.size}}
        return {"name": "repository", "persistentVolumeClaim": {"claimName": self.claim, "readOnly": True}}

    def init_containers(
        self, image: str, pull_policy: str
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The init step (and the volumes its credentials need); nothing for ``shared``."""
        if not self.per_pod:
            return [], []
        assert self.repository is not None
        # a node's copy keeps the repository's snapshots, which older pods on the node may still serve
        keep = self.repository.sync.keep_snapshots if self.node_cache else 1
        reader = source.access(self.repository, keep)
        script = PULL_SCRIPT
        if self.node_cache:
            script = TAKE_TURNS + PULL_SCRIPT.split("\n", 1)[1]
        container: dict[str, Any] = {
            "name": "repository",
            "image": image,
            "imagePullPolicy": pull_policy,
            "command": ["/bin/sh", "-c", script, "naiad-pull", *reader.args],
            "env": [
                {"name": "NAIAD_CHECK_PULL", "value": CHECK_PULL},
                {"name": "HOME", "value": "/tmp"},
                {"name": EXPECTED_SNAPSHOT_ENV, "value": self.snapshot or ""},
            ],
            "terminationMessagePath": TERMINATION_LOG,
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": [
                {"name": "repository", "mountPath": names.REPOSITORY_MOUNT},
                {"name": "tmp", "mountPath": "/tmp"},
            ],
            "securityContext": security.container(),
        }
        return [reader.apply(container)], reader.volumes

    def service_account(self) -> str | None:
        """A perPod pod reads the source itself, so it needs the repository's workload identity."""
        if self.per_pod:
            assert self.repository is not None
            return self.repository.source.credentials.service_account_name
        return None

    def annotations(self) -> dict[str, str]:
        return {SNAPSHOT_ANNOTATION: self.snapshot} if self.per_pod and self.snapshot else {}

    def planning_records(self, records: Mapping[str, ModelStatus]) -> dict[str, ModelStatus]:
        """The records a rollout plans from. A perPod pod holds exactly one snapshot, so there is no
        old version to keep loaded beside the new one on it (its copy may not even have it): the
        Deployment keeps old pods serving until new ones are Ready, and the plan starts from nothing
        active, targeting the snapshot's versions directly."""
        if not self.per_pod:
            return dict(records)
        return {
            name: r.model_copy(update={"content_hashes": {}, "default_version": None})
            for name, r in records.items()
        }

    def acting_pods(self, pods: Sequence[PodObservation]) -> list[PodObservation]:
        """The pods a rollout may act on: all of them with ``shared``; with ``perPod`` only those that
        hold the target snapshot (the others are being replaced by the Deployment)."""
        if not self.per_pod:
            return list(pods)
        return [p for p in pods if p.snapshot == self.snapshot]
