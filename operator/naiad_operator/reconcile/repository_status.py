"""ModelRepository status: what the last sync Job found, and the conditions that follow from it.

A failed sync never moves ``snapshot.current``: ``naiad repo sync`` leaves ``current`` untouched when it
fails, and status says the same thing — the previous snapshot stays Ready while ``Synced`` is False with
the reason, and the phase is Degraded rather than Failed.
"""

from __future__ import annotations

from datetime import datetime

from naiad_operator.api.modelrepository import (
    LastSync,
    ModelRepositorySpec,
    ModelRepositoryStatus,
    ModelVersionHash,
    RepositoryModel,
    RepositoryPhase,
    SnapshotStatus,
    SyncResult,
    SyncSummary,
)
from naiad_operator.api.observed import JobObservation, PodProblem
from naiad_operator.reconcile.conditions import condition, merge_conditions
from naiad_operator.reconcile.syncjob import Backoff, format_time, next_sync_time, retry_delay

#: Failure kinds of ``naiad repo sync`` that mean the source itself could not be reached or read:
#: ``source`` is any other failure talking to it (connection refused or reset, timeouts, 5xx).
UNREACHABLE_KINDS = frozenset({"credentials", "not_found", "source"})


def start_sync(
    status: ModelRepositoryStatus, spec: ModelRepositorySpec, job_name: str, generation: int, now: datetime
) -> ModelRepositoryStatus:
    """Status right after a sync Job was created for ``generation``."""
    return status.model_copy(
        update={
            "active_job": job_name,
            "sync_count": status.sync_count + 1,
            "synced_generation": generation,
            "last_trigger": spec.sync.trigger,
            "next_sync_time": None,
            "last_sync": LastSync(job_name=job_name, start_time=format_time(now)),
        }
    )


def finish_sync(
    status: ModelRepositoryStatus,
    spec: ModelRepositorySpec,
    job: JobObservation | None,
    summary: SyncSummary | None,
    now: datetime,
    backoff: Backoff,
    jitter: float,
) -> ModelRepositoryStatus:
    """Status once the active Job finished (or vanished): copy its summary in, keep the old snapshot on
    failure. A Job that is gone (``ttlSecondsAfterFinished`` ran out while the operator was down) is
    judged by what it wrote to the listing ConfigMap, which ``summary`` then is; only a Job gone without
    a word is a failure. ``jitter`` in [0, 1) spreads the retry of a failed sync (``retry_delay``)."""
    previous = status.last_sync or LastSync(job_name=status.active_job)
    done = job.completion_time if job is not None and job.completion_time else None
    done = done or (summary.finished_at if summary is not None else None) or format_time(now)
    if job is None and summary is None:
        result, message = SyncResult.FAILED, f"sync Job {status.active_job} disappeared before it finished"
    elif summary is None:
        assert job is not None
        result = SyncResult.FAILED if job.failed or not job.succeeded else SyncResult.SUCCEEDED
        message = (job.message or "the sync Job left no summary")[:1500]
    else:
        result = summary.result
        message = f"{summary.error_kind}: {summary.error}" if summary.error else ""
        if summary.truncated:
            where = "could not be read" if summary.listing else "was not written"
            message = (
                f"the listing ConfigMap {where} and the termination message holds "
                f"{len(summary.models)} of {summary.model_count or '?'} models: the others are not known yet"
            )
    failures = status.sync_failures + 1 if result is SyncResult.FAILED else 0
    retry = retry_delay(backoff, failures, jitter)
    last = previous.model_copy(update={"result": result, "completion_time": done, "message": message or None})
    update: dict[str, object] = {
        "active_job": None,
        "sync_failures": failures,
        "next_sync_time": next_sync_time(spec, result, now, retry),
    }
    if summary is not None:
        last = last.model_copy(
            update={
                "snapshot": summary.snapshot,
                "objects_listed": summary.objects_listed,
                "objects_copied": summary.objects_copied,
                "objects_reused": summary.objects_reused,
                "bytes_copied": summary.bytes_copied,
                "duration_seconds": summary.duration_seconds,
            }
        )
        if result is not SyncResult.FAILED and summary.snapshot:
            update["snapshot"] = _snapshots(status.snapshot, summary.snapshot, spec.sync.keep_snapshots)
            update["models"] = [
                RepositoryModel(
                    name=name,
                    versions=[
                        ModelVersionHash(version=v, content_hash=h) for v, h in sorted(versions.items())
                    ],
                )
                for name, versions in sorted(summary.models.items())
            ]
            update["model_count"] = summary.model_count or len(summary.models)
            update["models_complete"] = not summary.truncated
    update["last_sync"] = last
    return status.model_copy(update=update)


def cancel_sync(
    status: ModelRepositoryStatus, generation: int, now: datetime, suspended: bool = False
) -> ModelRepositoryStatus:
    """Status once a running Job was cancelled for a newer spec or ``suspend``: the snapshot stays as
    it was."""
    previous = status.last_sync or LastSync(job_name=status.active_job)
    if suspended:
        message = f"cancelled: the repository was suspended (generation {generation}) while it ran"
    else:
        message = f"cancelled: the spec changed (generation {generation}) while it ran"
    last = previous.model_copy(
        update={"result": SyncResult.FAILED, "completion_time": format_time(now), "message": message}
    )
    return status.model_copy(update={"active_job": None, "last_sync": last, "next_sync_time": None})


def _snapshots(previous: SnapshotStatus, current: str, keep: int) -> SnapshotStatus:
    available = [current, *(s for s in previous.available if s != current)][:keep]
    return SnapshotStatus(current=current, available=available)


def with_conditions(
    status: ModelRepositoryStatus, generation: int, now: datetime, stuck: PodProblem | None = None
) -> ModelRepositoryStatus:
    """Conditions and phase from the rest of status; transition times kept where nothing flipped.
    ``stuck`` says why the running sync Job's pod does not run (unschedulable, image, volume)."""
    last = status.last_sync
    result = last.result if last is not None else None
    has_snapshot = status.snapshot.current is not None
    failed = result is SyncResult.FAILED
    last_message = (last.message or "") if last is not None else ""
    kind = last_message.split(":", 1)[0] if failed else ""
    if result is None:
        reachable = condition("SourceReachable", None, "NotSyncedYet", generation=generation)
    elif failed and kind in UNREACHABLE_KINDS:
        reachable = condition("SourceReachable", False, "SourceUnreachable", last_message, generation)
    else:
        reachable = condition("SourceReachable", True, "Listed", generation=generation)
    if status.active_job and stuck is not None:
        message = f"sync Job {status.active_job} cannot run: {stuck.message}"
        synced = condition("Synced", False, stuck.reason, message, generation)
    elif status.active_job:
        synced = condition("Synced", False, "Syncing", f"sync Job {status.active_job} is running", generation)
    elif failed and last is not None:
        retry = ""
        if status.next_sync_time:
            retry = f" (failed {status.sync_failures} time(s) in a row; next try at {status.next_sync_time})"
        synced = condition("Synced", False, "SyncFailed", (last.message or "") + retry, generation)
    elif result is None:
        synced = condition("Synced", False, "Pending", "no sync has run yet", generation)
    else:
        synced = condition("Synced", True, "SnapshotMaterialized", status.snapshot.current or "", generation)
    if has_snapshot:
        ready = condition("Ready", True, "SnapshotAvailable", status.snapshot.current or "", generation)
    else:
        ready = condition("Ready", False, "NoSnapshot", "no sync has succeeded yet", generation)
    if status.active_job:
        phase = RepositoryPhase.SYNCING
    elif failed:
        phase = RepositoryPhase.DEGRADED if has_snapshot else RepositoryPhase.FAILED
    elif has_snapshot:
        phase = RepositoryPhase.READY
    else:
        phase = RepositoryPhase.PENDING
    conditions = merge_conditions(status.conditions, [reachable, synced, ready], format_time(now))
    return status.model_copy(
        update={"conditions": conditions, "phase": phase, "observed_generation": generation}
    )
