"""When a blocked model is tried again: the status a failed attempt leaves (retries, the next try from the
pass's clock), and what a later pass does with it at a given time, after an annotation or a spec change.
The end-to-end cases (a fix through configOverride, the annotation, on real pods) are in
``test_gitops.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from naiad_operator.api.inferenceservice import Failure, InferenceServiceSpec, ModelSpec, ModelStatus
from naiad_operator.api.observed import PodObservation, VersionObservation, VersionState
from naiad_operator.reconcile import retry, rollout
from naiad_operator.reconcile.rollout import Change, StageKind
from naiad_operator.reconcile.service_status import model_status
from naiad_operator.reconcile.syncjob import format_time

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SNAPSHOT = {"m": {1: "h1", 2: "h2"}}
SPEC = InferenceServiceSpec.model_validate({"repository": {"name": "r"}, "models": [{"name": "m"}]})
OOM = "version 2: initialize() raised MemoryError: CUDA out of memory"


def pods(*versions: int) -> list[PodObservation]:
    index = {"m": {v: VersionObservation(VersionState.READY) for v in versions}}
    return [PodObservation("p0", "http://p0:8000", True, index)]


def fail(record: ModelStatus, now: datetime, message: str = OOM, token: str | None = None) -> ModelStatus:
    """The status a pass at ``now`` writes after its rollout of v2 failed with ``message``."""
    attempt = retry.Attempt(now, retry.spec_fingerprint(SPEC), token)
    plan = rollout.plan(SPEC.models, SNAPSHOT, {"m": record}, pods(1), attempt)
    mp = plan.models["m"]
    assert mp.change is Change.ROLLOUT
    failure = Failure(reason="ModelLoadFailed", message=message, pod="p0", version=2, time=format_time(now))
    return model_status(mp, True, record, pods(1), failure, format_time(now), 10, attempt)


def change_at(
    record: ModelStatus, now: datetime, token: str | None = None, spec: ModelSpec | None = None
) -> Change:
    attempt = retry.Attempt(now, retry.spec_fingerprint(SPEC), token)
    plan = rollout.plan([spec or SPEC.models[0]], SNAPSHOT, {"m": record}, pods(1), attempt)
    return plan.models["m"].change


ACTIVE = ModelStatus(name="m", active_versions=[1], default_version=1, content_hashes={1: "h1"})


def test_transient_failures_back_off_doubling_up_to_the_cap_from_the_passed_clock() -> None:
    first = fail(ACTIVE, T0)
    assert first.transition_status.value == "BlockedByFailedLoad"
    assert (first.retries, first.next_retry) == (1, "2026-03-01T12:00:30Z")
    assert change_at(first, T0 + timedelta(seconds=29)) is Change.BLOCKED
    assert change_at(first, T0 + timedelta(seconds=30)) is Change.ROLLOUT  # due: tried again
    second = fail(first, T0 + timedelta(seconds=30))
    assert (second.retries, second.next_retry) == (2, "2026-03-01T12:01:30Z")  # 60 s later
    record, now = second, T0
    for _ in range(10):  # each attempt when it is due
        assert record.next_retry is not None
        now = retry.parse_time(record.next_retry)
        record = fail(record, now)
    assert record.retries == 12 and record.next_retry == format_time(now + timedelta(minutes=30))  # capped


def test_a_permanent_failure_waits_for_a_change_or_the_annotation() -> None:
    blocked = fail(ACTIVE, T0, "version 2: initialize() raised RuntimeError: weights are corrupt")
    assert blocked.next_retry is None and blocked.retries == 1
    assert change_at(blocked, T0 + timedelta(days=1)) is Change.BLOCKED
    assert change_at(blocked, T0, token="2") is Change.ROLLOUT  # the retry annotation got a new value
    override = ModelSpec.model_validate({"name": "m", "configOverride": {"max_batch_size": 4}})
    assert change_at(blocked, T0, spec=override) is Change.ROLLOUT  # a different override is a new attempt
    bigger = SPEC.model_copy(update={"server": SPEC.server.model_copy(update={"gpus": 2})})
    assert retry.spec_fingerprint(bigger) != blocked.blocked_spec  # more GPUs: tried again


def test_success_clears_the_retry_state_and_records_the_override() -> None:
    blocked = fail(ACTIVE, T0)
    spec = ModelSpec.model_validate({"name": "m", "configOverride": {"max_batch_size": 4}})
    attempt = retry.Attempt(T0, retry.spec_fingerprint(SPEC), None)
    plan = rollout.plan([spec], SNAPSHOT, {"m": blocked}, pods(1), attempt)
    assert plan.stage(StageKind.LOAD) is not None
    done = model_status(plan.models["m"], True, blocked, pods(2), None, format_time(T0), 10, attempt)
    assert done.transition_status.value == "UpToDate" and done.active_versions == [2]
    assert (done.retries, done.next_retry, done.blocked_hashes) == (0, None, None)
    assert done.config_hash == retry.fingerprint({"max_batch_size": 4})
