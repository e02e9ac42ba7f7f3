"""Sync Jobs: when to start one, what it runs, and how to read what it left behind.

A Job runs ``naiad repo sync SOURCE /repository --json`` from the server image, so the tool that writes
snapshots and the server that reads them always agree on the layout. A small Python step in the same
container shrinks ``--json``'s document (dropping paths and GC detail, shortening hashes) into the
compact summary, writes all of it to the repository's listing ConfigMap (``reconcile.listing``: every
model, however many) and leaves a copy cut to the kubelet's 4 KiB as the termination message, the
fallback when the ConfigMap could not be written; the full document still goes to the Job's log.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from naiad_operator.api.modelrepository import (
    ModelRepositorySpec,
    ModelRepositoryStatus,
    SyncResult,
    SyncSummary,
)
from naiad_operator.reconcile import listing, names, security, source

TERMINATION_LOG = "/dev/termination-log"

#: Turns ``naiad repo sync --json`` output (argv[1]) and its stderr (argv[2]) into the compact summary
#: (``SyncSummary``'s JSON form): the whole of it into the listing ConfigMap named by
#: ``$NAIAD_LISTING_CONFIGMAP`` through the API with the pod's ServiceAccount (argv[3]: where its token
#: is mounted), and a copy cut to fit the termination message on stdout. Hashes are cut to 16 hex
#: digits and each version's hash folds in the model's config hash, so a config.pbtxt change counts as
#: a change of every version. Writing the ConfigMap is best effort: the sync's outcome does not depend
#: on it, and what went wrong is printed to the log.
COMPACT_SUMMARY = f"KEY = {listing.LISTING_KEY!r}\nMAX_LISTING = {listing.LISTING_LIMIT}\n" + r"""
import base64, gzip, hashlib, json, os, ssl, sys, time, urllib.request
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
    "finishedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
}
error = doc.get("error")
models = {}
if error:
    problems = ["%s: %s" % (m["name"], e) for m in doc.get("models") or [] for e in m.get("errors") or []]
    out["errorKind"] = error.get("kind", "error")
    out["error"] = "; ".join([error.get("message", "")] + problems)[:1500]
else:
    for m in doc.get("models") or []:
        config = m.get("config_hash") or ""
        models[m["name"]] = {
            str(v["version"]): "sha256:"
            + hashlib.sha256((v["content_hash"] + config).encode()).hexdigest()[:16]
            for v in m.get("versions") or []
        }
    out["models"] = models
    out["modelCount"] = len(models)


def write_listing():
    name = os.environ.get("NAIAD_LISTING_CONFIGMAP")
    if not name or len(sys.argv) < 4:
        return False
    account = sys.argv[3]
    try:
        listing = {"job": os.environ.get("NAIAD_SYNC_JOB"), "summary": out}
        raw = json.dumps(listing, separators=(",", ":")).encode()
        blob = base64.b64encode(gzip.compress(raw, 9)).decode()
        if len(blob) > MAX_LISTING:
            raise ValueError("%d bytes do not fit a ConfigMap" % len(blob))
        with open(account + "/namespace") as f:
            namespace = f.read().strip()
        with open(account + "/token") as f:
            token = f.read().strip()
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        host = "[%s]" % host if ":" in host else host
        url = "https://%s:%s/api/v1/namespaces/%s/configmaps/%s" % (
            host, os.environ["KUBERNETES_SERVICE_PORT"], namespace, name)
        request = urllib.request.Request(
            url,
            data=json.dumps({"binaryData": {KEY: blob}}).encode(),
            method="PATCH",
            headers={"Authorization": "Bearer " + token, "Content-Type": "application/merge-patch+json"},
        )
        context = ssl.create_default_context(cafile=account + "/ca.crt")
        urllib.request.urlopen(request, context=context, timeout=30).close()
        return True
    except Exception as exc:
        print("naiad-sync: listing ConfigMap %s not written: %s" % (name, exc), file=sys.stderr)
        return False


out["listing"] = write_listing()
# the termination message: as many models as fit, counted once each (not re-encoded per model dropped)
short = dict(out, models={}, truncated=True)
room = LIMIT - len(json.dumps(short, separators=(",", ":")))
for name, versions in models.items():
    room -= len(json.dumps({name: versions}, separators=(",", ":"))) - 1  # without braces, with a comma
    if room < 0:
        break
    short["models"][name] = versions
else:
    short = out
print(json.dumps(short, separators=(",", ":")))
"""

#: The Job's shell step: sync, show the full summary in the log, leave the compact one for the kubelet.
SYNC_SCRIPT = (
    'naiad repo sync "$@" --json > /tmp/summary.json 2> /tmp/sync.err\n'
    "status=$?\n"
    "cat /tmp/summary.json\n"
    "cat /tmp/sync.err >&2\n"
    f'python3 -c "$NAIAD_COMPACT_SUMMARY" /tmp/summary.json /tmp/sync.err {listing.ACCOUNT_DIR}'
    f" > {TERMINATION_LOG}\n"
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


def superseded(spec: ModelRepositorySpec, status: ModelRepositoryStatus, generation: int) -> bool:
    """The running Job was started for an older spec: cancel it. A Job's pod template cannot change,
    so a Job stuck on the old spec (a node selector no node matches, a wrong image, a wrong URI with a
    slow listing) would otherwise hold the repository until its activeDeadlineSeconds; ``suspend``
    stops a running sync the same way."""
    return status.active_job is not None and (status.synced_generation != generation or spec.suspend)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry delays of failed syncs: ``base`` seconds after the first failure, doubling with each
    failure in a row up to ``cap``. A source that is down (S3 unreachable, credentials revoked) is not
    hammered every few seconds for hours, and a fixed short delay would make every repository of a
    cluster retry in lockstep after a shared outage; jitter spreads them."""

    base: float
    cap: float


def retry_delay(backoff: Backoff, failures: int, jitter: float) -> float:
    """Seconds before retry number ``failures`` (1 = after the first failure). ``jitter`` in [0, 1)
    comes from the caller's random source: the delay is drawn from the upper half of the capped
    exponential step ("equal jitter"), so it never drops below half the step."""
    step = min(backoff.cap, backoff.base * 2.0 ** max(0, failures - 1))
    return step / 2 + step / 2 * min(max(jitter, 0.0), 1.0)


def next_sync_time(
    spec: ModelRepositorySpec, result: SyncResult, finished: datetime, retry_seconds: float
) -> str | None:
    """When to sync again without a change: on the interval, or (after a failure) after the retry delay
    when that comes first."""
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
    fixed_ids: bool = True,
    protect: Sequence[str] = (),
) -> dict[str, Any]:
    """The Job for one sync. Only this pod (and, with ``perPod`` storage, the servers' init step)
    sees the source credentials. ``protect``: snapshots GC keeps whatever ``keepSnapshots`` says
    (those InferenceServices pin, see :func:`pinned_snapshots`)."""
    reader = source.access(spec, spec.sync.keep_snapshots)
    template = spec.sync.template
    env: list[dict[str, Any]] = [
        {"name": "NAIAD_COMPACT_SUMMARY", "value": COMPACT_SUMMARY},
        {"name": listing.CONFIGMAP_ENV, "value": listing.configmap_name(name)},
        {"name": listing.JOB_ENV, "value": job_name},
        {"name": "HOME", "value": "/tmp"},
        *template.env,
    ]
    protected = [arg for snapshot in sorted(set(protect)) for arg in ("--protect", snapshot)]
    container: dict[str, Any] = {
        "name": "sync",
        "image": image,
        "command": ["/bin/sh", "-c", SYNC_SCRIPT, "naiad-sync", *reader.args, *protected],
        "env": env,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "repository", "mountPath": names.REPOSITORY_MOUNT},
            {"name": "tmp", "mountPath": "/tmp"},
            *template.volume_mounts,
        ],
        "securityContext": security.container(),
    }
    reader.apply(container)
    if spec.sync.resources:
        container["resources"] = spec.sync.resources
    labels = {**template.labels, **names.repository_labels(name), names.ROLE_LABEL: "sync"}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": security.pod(fixed_ids),
        "containers": [container],
        "volumes": [
            {"name": "repository", "persistentVolumeClaim": {"claimName": claim}},
            {"name": "tmp", "emptyDir": {}},
            *reader.volumes,
            *template.volumes,
        ],
    }
    # the account that may write the listing ConfigMap (and the repository's workload identity if any)
    pod_spec["serviceAccountName"] = listing.job_account(name, spec)
    pod_spec["automountServiceAccountToken"] = True
    placement: dict[str, Any] = {
        "nodeSelector": dict(template.node_selector),
        "tolerations": list(template.tolerations),
        "affinity": template.affinity,
        "imagePullSecrets": list(template.image_pull_secrets),
        "priorityClassName": template.priority_class_name,
    }
    pod_spec.update({k: v for k, v in placement.items() if v})
    pod_meta: dict[str, Any] = {"labels": labels}
    if template.annotations:
        pod_meta["annotations"] = dict(template.annotations)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": names.child_metadata(job_name, namespace, labels, owner),
        "spec": {
            "backoffLimit": spec.sync.backoff_limit,
            "activeDeadlineSeconds": spec.sync.active_deadline_seconds,
            "ttlSecondsAfterFinished": ttl_seconds,
            "template": {"metadata": pod_meta, "spec": pod_spec},
        },
    }


def pinned_snapshots(repository: str, services: Sequence[dict[str, Any]]) -> list[str]:
    """Snapshots of ``repository`` that InferenceServices (bodies of one namespace) pin: GC must keep
    them, or a pinned service's next pod (a restart, a scale-up) would find nothing to load."""
    pinned: set[str] = set()
    for body in services:
        ref = (body.get("spec") or {}).get("repository") or {}
        if ref.get("name") == repository and ref.get("snapshot"):
            pinned.add(str(ref["snapshot"]))
    return sorted(pinned)


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
