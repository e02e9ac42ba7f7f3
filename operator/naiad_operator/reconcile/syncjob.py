"""Sync Jobs: when to start one, what it runs, and how to read what it left behind.

A Job runs ``naiad repo sync SOURCE /repository --json`` from the server image, so the tool that writes
snapshots and the server that reads them always agree on the layout. The summary comes back as the
container's termination message, which the kubelet caps at 4 KiB; a small Python step in the same
container shrinks ``--json``'s document (dropping paths and GC detail, shortening hashes) to fit, and the
full document still goes to the Job's log.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from naiad_operator.api.modelrepository import (
    ModelRepositorySpec,
    ModelRepositoryStatus,
    SyncResult,
    SyncSummary,
    Verify,
)
from naiad_operator.reconcile import names, security

TERMINATION_LOG = "/dev/termination-log"

#: Turns ``naiad repo sync --json`` output (argv[1]) and its stderr (argv[2]) into the compact summary
#: (``SyncSummary``'s JSON form) on stdout. Hashes are cut to 16 hex digits and each version's hash
#: folds in the model's config hash, so a config.pbtxt change counts as a change of every version.
COMPACT_SUMMARY = r"""
import hashlib, json, sys
LIMIT = 4000
try:
    with open(sys.argv[1]) as f:
        doc = json.load(f)
except Exception:
    with open(sys.argv[2], errors="replace") as f:
        tail = " ".join(f.read().strip().splitlines()[-5:])
    message = tail or "naiad repo sync printed no summary"
    doc = {"result": "Failed", "error": {"kind": "error", "message": message}}
snap = doc.get("snapshot") or {}
objects = doc.get("objects") or {}
out = {
    "result": doc.get("result", "Failed"),
    "snapshot": snap.get("id"),
    "previous": snap.get("previous"),
    "objectsListed": objects.get("listed", 0),
    "objectsCopied": objects.get("copied", 0),
    "objectsReused": objects.get("reused", 0),
    "bytesCopied": (doc.get("bytes") or {}).get("copied", 0),
    "durationSeconds": doc.get("duration_seconds", 0),
}
error = doc.get("error")
if error:
    problems = ["%s: %s" % (m["name"], e) for m in doc.get("models") or [] for e in m.get("errors") or []]
    out["errorKind"] = error.get("kind", "error")
    out["error"] = "; ".join([error.get("message", "")] + problems)[:1500]
else:
    models = {}
    for m in doc.get("models") or []:
        config = m.get("config_hash") or ""
        models[m["name"]] = {
            str(v["version"]): "sha256:"
            + hashlib.sha256((v["content_hash"] + config).encode()).hexdigest()[:16]
            for v in m.get("versions") or []
        }
    out["models"] = models
    while models and len(json.dumps(out, separators=(",", ":"))) > LIMIT:
        models.popitem()
        out["truncated"] = True
print(json.dumps(out, separators=(",", ":")))
"""

#: The Job's shell step: sync, show the full summary in the log, leave the compact one for the kubelet.
SYNC_SCRIPT = (
    'naiad repo sync "$@" --json > /tmp/summary.json 2> /tmp/sync.err\n'
    "status=$?\n"
    "cat /tmp/summary.json\n"
    "cat /tmp/sync.err >&2\n"
    f'python3 -c "$NAIAD_COMPACT_SUMMARY" /tmp/summary.json /tmp/sync.err > {TERMINATION_LOG}\n'
    'exit "$status"\n'
)


def sync_reason(
    spec: ModelRepositorySpec, status: ModelRepositoryStatus, generation: int, now: datetime
) -> str | None:
    """Why a sync should start now (an Event reason), or None. One Job at a time per repository."""
    if spec.suspend or status.active_job:
        return None
    if status.synced_generation is None:
        return "Created"
    if status.synced_generation != generation:
        return "SpecChanged"
    if spec.sync.trigger and spec.sync.trigger != status.last_trigger:
        return "Triggered"
    if status.next_sync_time and now >= _parse_time(status.next_sync_time):
        return "Interval"
    return None


def next_sync_time(
    spec: ModelRepositorySpec, result: SyncResult, finished: datetime, retry_seconds: float
) -> str | None:
    """When to sync again without a change: on the interval, or (after a failure) on the retry delay."""
    interval = spec.sync.interval_seconds()
    if result is SyncResult.FAILED:
        interval = min(interval, retry_seconds) if interval else retry_seconds
    if interval is None:
        return None
    return format_time(finished + timedelta(seconds=interval))


def desired_sync_job(
    name: str,
    namespace: str,
    owner: dict[str, Any],
    spec: ModelRepositorySpec,
    claim: str,
    job_name: str,
    image: str,
    ttl_seconds: int,
) -> dict[str, Any]:
    """The Job for one sync. Only this pod sees the source credentials; servers never do."""
    args = [spec.source.sync_uri(), names.REPOSITORY_MOUNT, "--keep", str(spec.sync.keep_snapshots)]
    if spec.sync.verify is Verify.SHA256:
        args += ["--verify", "sha256"]
    env: list[dict[str, Any]] = [
        {"name": "NAIAD_COMPACT_SUMMARY", "value": COMPACT_SUMMARY},
        {"name": "HOME", "value": "/tmp"},
    ]
    if spec.source.region:
        env.append({"name": "AWS_DEFAULT_REGION", "value": spec.source.region})
    container: dict[str, Any] = {
        "name": "sync",
        "image": image,
        "command": ["/bin/sh", "-c", SYNC_SCRIPT, "naiad-sync", *args],
        "env": env,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "repository", "mountPath": names.REPOSITORY_MOUNT},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": security.container(),
    }
    creds = spec.source.credentials
    if creds.secret_ref is not None:
        container["envFrom"] = [{"secretRef": {"name": creds.secret_ref.name}}]
    if spec.sync.resources:
        container["resources"] = spec.sync.resources
    labels = {**names.repository_labels(name), names.ROLE_LABEL: "sync"}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": security.pod(),
        "containers": [container],
        "volumes": [
            {"name": "repository", "persistentVolumeClaim": {"claimName": claim}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    if creds.service_account_name:
        pod_spec["serviceAccountName"] = creds.service_account_name
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": names.child_metadata(job_name, namespace, labels, owner),
        "spec": {
            "backoffLimit": spec.sync.backoff_limit,
            "activeDeadlineSeconds": spec.sync.active_deadline_seconds,
            "ttlSecondsAfterFinished": ttl_seconds,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def parse_summary(message: str | None) -> SyncSummary | None:
    """The Job's termination message as a summary; None when it is missing or not ours (e.g. the
    kubelet fell back to a log tail because the container died before writing it)."""
    if not message:
        return None
    try:
        return SyncSummary.model_validate(json.loads(message))
    except (ValueError, ValidationError):
        return None


def format_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
