"""Sync Jobs: when one starts, the summary a Job leaves behind, and the repository status it produces."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from naiad_operator.api.modelrepository import (
    LastSync,
    ModelRepositorySpec,
    ModelRepositoryStatus,
    RepositoryPhase,
    SnapshotStatus,
    SyncResult,
)
from naiad_operator.api.observed import JobObservation
from naiad_operator.reconcile import repository_status, syncjob
from naiad_operator.reconcile.compare import merge_patch

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SPEC = ModelRepositorySpec.model_validate({"source": {"uri": "s3://b/p"}, "sync": {"interval": "10m"}})
#: A fixed 300 s retry (jitter 1.0 takes the full step), as the status tests below expect.
FIXED = syncjob.Backoff(300, 300)


def _summary_doc(models: int = 2) -> dict[str, Any]:
    """What ``naiad repo sync --json`` prints (naiad.repository.sync.engine.SyncResult.to_json)."""
    return {
        "result": "Succeeded",
        "source": "s3://b/p",
        "destination": "/repository",
        "snapshot": {
            "id": "sha256:" + "a" * 64,
            "path": "/repository/snapshots/" + "a" * 64,
            "previous": None,
            "switched": True,
        },
        "objects": {"listed": 5, "copied": 3, "reused": 2},
        "bytes": {"listed": 500, "copied": 300},
        "duration_seconds": 1.5,
        "models": [
            {
                "name": f"model{i:03d}",
                "valid": True,
                "backend": "python",
                "config_hash": f"sha256:c{i}",
                "versions": [{"version": 1, "content_hash": f"sha256:v{i}", "size_bytes": 10}],
                "errors": [],
                "warnings": [],
            }
            for i in range(models)
        ],
        "warnings": [],
        "gc": {"removed_snapshots": [], "removed_objects": 0, "freed_bytes": 0},
    }


def _compact(tmp_path: Path, stdout: str, stderr: str = "") -> str:
    """Run the Job's compaction step exactly as the container does."""
    (tmp_path / "summary.json").write_text(stdout)
    (tmp_path / "sync.err").write_text(stderr)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            syncjob.COMPACT_SUMMARY,
            str(tmp_path / "summary.json"),
            str(tmp_path / "sync.err"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_compact_summary_keeps_what_status_needs(tmp_path: Path) -> None:
    summary = syncjob.parse_summary(_compact(tmp_path, json.dumps(_summary_doc())))
    assert summary is not None
    assert summary.result is SyncResult.SUCCEEDED and summary.snapshot == "sha256:" + "a" * 64
    assert (summary.objects_listed, summary.objects_copied, summary.objects_reused) == (5, 3, 2)
    assert summary.bytes_copied == 300 and summary.duration_seconds == 1.5
    assert set(summary.models) == {"model000", "model001"}
    assert summary.models["model000"][1].startswith("sha256:") and len(summary.models["model000"][1]) == 23


def test_a_config_change_changes_every_version_hash(tmp_path: Path) -> None:
    doc = _summary_doc(1)
    first = syncjob.parse_summary(_compact(tmp_path, json.dumps(doc)))
    doc["models"][0]["config_hash"] = "sha256:other"
    second = syncjob.parse_summary(_compact(tmp_path, json.dumps(doc)))
    assert first is not None and second is not None
    assert first.models["model000"][1] != second.models["model000"][1]


def test_compact_summary_fits_the_termination_message(tmp_path: Path) -> None:
    message = _compact(tmp_path, json.dumps(_summary_doc(200)))
    assert len(message.encode()) <= 4096
    summary = syncjob.parse_summary(message)
    assert summary is not None and summary.truncated and 0 < len(summary.models) < 200


def test_compact_summary_of_a_failure(tmp_path: Path) -> None:
    failed = {
        "result": "Failed",
        "error": {"kind": "credentials", "message": "access denied"},
        "models": [{"name": "m", "errors": ["bad config"]}],
    }
    summary = syncjob.parse_summary(_compact(tmp_path, json.dumps(failed)))
    assert summary is not None and summary.result is SyncResult.FAILED
    assert summary.error_kind == "credentials" and summary.error == "access denied; m: bad config"


def test_compact_summary_when_the_tool_crashed(tmp_path: Path) -> None:
    summary = syncjob.parse_summary(_compact(tmp_path, "", "Traceback...\nOSError: disk full\n"))
    assert summary is not None and summary.result is SyncResult.FAILED
    assert "disk full" in (summary.error or "")


@pytest.mark.parametrize("message", [None, "", "not json", '{"result": "Weird"}', "Error: log tail"])
def test_unusable_messages_are_no_summary(message: str | None) -> None:
    assert syncjob.parse_summary(message) is None


@pytest.mark.parametrize(
    ("spec", "status", "generation", "now", "expected"),
    [
        (SPEC, ModelRepositoryStatus(), 1, NOW, "Created"),
        (SPEC, ModelRepositoryStatus(synced_generation=1), 2, NOW, "SpecChanged"),
        (SPEC, ModelRepositoryStatus(synced_generation=1), 1, NOW, None),
        (SPEC, ModelRepositoryStatus(synced_generation=1, active_job="j"), 2, NOW, None),  # one at a time
        (SPEC.model_copy(update={"suspend": True}), ModelRepositoryStatus(), 1, NOW, None),
        (
            ModelRepositorySpec.model_validate({"source": {"uri": "s3://b"}, "sync": {"trigger": "v2"}}),
            ModelRepositoryStatus(synced_generation=1, last_trigger="v1"),
            1,
            NOW,
            "Triggered",
        ),
        (
            SPEC,
            ModelRepositoryStatus(synced_generation=1, next_sync_time="2026-01-01T11:59:00Z"),
            1,
            NOW,
            "Interval",
        ),
        (
            SPEC,
            ModelRepositoryStatus(synced_generation=1, next_sync_time="2026-01-01T12:01:00Z"),
            1,
            NOW,
            None,
        ),
    ],
)
def test_sync_reason(
    spec: ModelRepositorySpec,
    status: ModelRepositoryStatus,
    generation: int,
    now: datetime,
    expected: str | None,
) -> None:
    assert syncjob.sync_reason(spec, status, generation, now) == expected


def test_interval_parsing() -> None:
    assert (
        ModelRepositorySpec.model_validate(
            {"source": {"uri": "s3://b"}, "sync": {"interval": "1h30m"}}
        ).sync.interval_seconds()
        == 5400
    )
    assert (
        SPEC.model_copy(
            update={"sync": SPEC.sync.model_copy(update={"interval": None})}
        ).sync.interval_seconds()
        is None
    )


def _finished(result: str, message: str | None, status: ModelRepositoryStatus) -> ModelRepositoryStatus:
    job = JobObservation(
        "models-sync-2",
        succeeded=result != "Failed",
        failed=result == "Failed",
        completion_time="2026-01-01T12:00:00Z",
        message=message,
    )
    after = repository_status.finish_sync(status, SPEC, job, syncjob.parse_summary(message), NOW, FIXED, 1.0)
    return repository_status.with_conditions(after, 1, NOW)


def test_a_successful_sync_moves_the_snapshot() -> None:
    started = repository_status.start_sync(ModelRepositoryStatus(), SPEC, "models-sync-1", 1, NOW)
    assert started.active_job == "models-sync-1" and started.sync_count == 1
    assert repository_status.with_conditions(started, 1, NOW).phase is RepositoryPhase.SYNCING
    message = json.dumps(
        {
            "result": "Succeeded",
            "snapshot": "sha256:new",
            "objectsListed": 4,
            "objectsCopied": 4,
            "models": {"m": {"1": "sha256:x"}},
        }
    )
    status = _finished("Succeeded", message, started)
    assert status.phase is RepositoryPhase.READY and status.active_job is None
    assert status.snapshot == SnapshotStatus(current="sha256:new", available=["sha256:new"])
    assert status.models[0].hashes() == {1: "sha256:x"} and status.model_count == 1
    assert status.last_sync is not None and status.last_sync.objects_copied == 4
    assert status.next_sync_time == "2026-01-01T12:10:00Z"
    assert [c.status for c in status.conditions] == ["True", "True", "True"]


def test_a_failed_sync_keeps_the_previous_snapshot() -> None:
    ready = ModelRepositoryStatus(
        snapshot=SnapshotStatus(current="sha256:old", available=["sha256:old"]),
        active_job="models-sync-2",
        last_sync=LastSync(job_name="models-sync-2"),
    )
    message = json.dumps({"result": "Failed", "errorKind": "credentials", "error": "InvalidAccessKeyId"})
    status = _finished("Failed", message, ready)
    assert status.snapshot.current == "sha256:old" and status.phase is RepositoryPhase.DEGRADED
    conditions = {c.type: c for c in status.conditions}
    assert (
        conditions["SourceReachable"].status == "False"
        and "InvalidAccessKeyId" in conditions["SourceReachable"].message
    )
    assert conditions["Synced"].reason == "SyncFailed" and conditions["Ready"].status == "True"
    assert status.next_sync_time == "2026-01-01T12:05:00Z"  # retried sooner than the interval


def test_a_job_without_summary_and_a_vanished_job_are_failures() -> None:
    status = ModelRepositoryStatus(active_job="j")
    assert _finished("Failed", "OOMKilled", status).last_sync.result is SyncResult.FAILED  # type: ignore[union-attr]
    gone = repository_status.finish_sync(status, SPEC, None, None, NOW, FIXED, 1.0)
    assert gone.last_sync is not None and "disappeared" in (gone.last_sync.message or "")
    assert repository_status.with_conditions(gone, 1, NOW).phase is RepositoryPhase.FAILED


def test_status_is_stable_when_nothing_happens() -> None:
    """Recomputing conditions later with no change keeps transition times: the patch is empty."""
    message = json.dumps({"result": "Succeeded", "snapshot": "sha256:s", "models": {}})
    status = _finished("Succeeded", message, ModelRepositoryStatus(active_job="j"))
    again = repository_status.with_conditions(status, 1, NOW + timedelta(minutes=5))
    assert merge_patch(status.dump(), again.dump()) == {}


def test_a_running_sync_is_superseded_by_a_spec_change_or_suspend() -> None:
    """A Job's pod template cannot change: a running Job of an older spec (or under suspend) is
    cancelled, and the cancelled sync keeps the snapshot and lets the new spec start a Job."""
    running = ModelRepositoryStatus(
        synced_generation=1, active_job="models-sync-1", snapshot=SnapshotStatus(current="sha256:a")
    )
    assert not syncjob.superseded(SPEC, running, 1)
    assert syncjob.superseded(SPEC, running, 2)
    assert syncjob.superseded(SPEC.model_copy(update={"suspend": True}), running, 1)
    assert not syncjob.superseded(SPEC, ModelRepositoryStatus(synced_generation=1), 2)  # nothing runs
    cancelled = repository_status.cancel_sync(running, 2, NOW)
    assert cancelled.active_job is None and cancelled.snapshot.current == "sha256:a"
    assert cancelled.last_sync is not None and cancelled.last_sync.result is SyncResult.FAILED
    assert "spec changed" in (cancelled.last_sync.message or "")
    assert syncjob.sync_reason(SPEC, cancelled, 2, NOW) == "SpecChanged"


def test_retries_back_off_exponentially_with_jitter_up_to_the_cap() -> None:
    backoff = syncjob.Backoff(base=30, cap=900)
    low = [syncjob.retry_delay(backoff, n, 0.0) for n in range(1, 8)]
    high = [syncjob.retry_delay(backoff, n, 1.0) for n in range(1, 8)]
    assert high == [30, 60, 120, 240, 480, 900, 900]
    assert low == [h / 2 for h in high]  # jitter moves a retry within the upper half of its step
    assert syncjob.retry_delay(backoff, 3, 0.5) == 90


def test_failures_in_a_row_push_the_next_try_back_and_status_says_when() -> None:
    """Each failed sync doubles the delay (shown as ``syncFailures`` and ``nextSyncTime``, and in the
    Synced condition); a success starts over. The interval still comes first when it is sooner."""
    spec = ModelRepositorySpec.model_validate({"source": {"uri": "s3://b/p"}})  # no interval
    backoff = syncjob.Backoff(base=30, cap=900)
    failed = json.dumps({"result": "Failed", "errorKind": "source", "error": "connection refused"})
    status = ModelRepositoryStatus(snapshot=SnapshotStatus(current="sha256:a"))
    nexts = []
    for n in range(1, 5):
        job = JobObservation(f"j{n}", failed=True, completion_time="2026-01-01T12:00:00Z", message=failed)
        status = status.model_copy(update={"active_job": f"j{n}"})
        status = repository_status.finish_sync(
            status, spec, job, syncjob.parse_summary(failed), NOW, backoff, 1.0
        )
        status = repository_status.with_conditions(status, 1, NOW)
        nexts.append(status.next_sync_time)
        assert status.sync_failures == n
    assert nexts == [
        "2026-01-01T12:00:30Z",
        "2026-01-01T12:01:00Z",
        "2026-01-01T12:02:00Z",
        "2026-01-01T12:04:00Z",
    ]
    synced = next(c for c in status.conditions if c.type == "Synced")
    assert "failed 4 time(s) in a row; next try at 2026-01-01T12:04:00Z" in synced.message
    ok = json.dumps({"result": "NoChange", "snapshot": "sha256:a", "models": {}})
    job = JobObservation("j5", succeeded=True, message=ok)
    status = repository_status.finish_sync(
        status.model_copy(update={"active_job": "j5"}),
        spec,
        job,
        syncjob.parse_summary(ok),
        NOW,
        backoff,
        1.0,
    )
    assert status.sync_failures == 0 and status.next_sync_time is None
    with_interval = SPEC  # 10 minutes: after many failures the interval is sooner than the backoff
    many = ModelRepositoryStatus(sync_failures=9, active_job="j")
    job = JobObservation("j", failed=True, message=failed)
    after = repository_status.finish_sync(
        many, with_interval, job, syncjob.parse_summary(failed), NOW, backoff, 1.0
    )
    assert after.next_sync_time == "2026-01-01T12:10:00Z"


def test_a_pinned_snapshot_is_protected_by_the_next_sync_job() -> None:
    services = [
        {"spec": {"repository": {"name": "models", "snapshot": "sha256:" + "a" * 64}}},
        {"spec": {"repository": {"name": "models"}}},  # follows current: nothing to protect
        {"spec": {"repository": {"name": "other", "snapshot": "sha256:" + "b" * 64}}},
    ]
    pinned = syncjob.pinned_snapshots("models", services)
    assert pinned == ["sha256:" + "a" * 64]
    owner = {"apiVersion": "v", "kind": "ModelRepository", "name": "models", "uid": "u"}
    job = syncjob.desired_sync_job(
        "models", "ml", owner, SPEC, "claim", "models-sync-1", "img", 60, True, pinned
    )
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--protect") :] == ["--protect", "sha256:" + "a" * 64]
