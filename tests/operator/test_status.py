"""InferenceService status from observations, and the write-only-what-changed machinery."""

from __future__ import annotations

from naiad_operator.api.inferenceservice import (
    Failure,
    InferenceServiceSpec,
    InferenceServiceStatus,
    ModelState,
    Phase,
    TransitionStatus,
)
from naiad_operator.api.modelrepository import ModelRepositoryStatus
from naiad_operator.api.observed import DeploymentObservation, PodObservation
from naiad_operator.reconcile import rollout
from naiad_operator.reconcile.compare import contains, merge_patch, needs_apply, stamp
from naiad_operator.reconcile.service_status import Observed, service_status

from tests.operator.test_rollout import FAILED, READY, pod, record

NOW = "2026-01-01T00:00:00Z"
REPO = ModelRepositoryStatus.model_validate(
    {
        "snapshot": {"current": "sha256:s1", "available": ["sha256:s1"]},
        "conditions": [{"type": "Ready", "status": "True"}],
        "models": [
            {
                "name": "m",
                "versions": [{"version": 1, "contentHash": "h1"}, {"version": 2, "contentHash": "h2"}],
            }
        ],
    }
)
SPEC = InferenceServiceSpec.model_validate(
    {
        "repository": {"name": "r"},
        "models": [{"name": "m"}, {"name": "opt", "required": False}],
        "replicas": 2,
    }
)
DEPLOYMENT = DeploymentObservation(
    replicas=2, ready_replicas=2, updated_replicas=2, generation=1, observed_generation=1
)
SNAPSHOT = {"m": {1: "h1", 2: "h2"}, "opt": {1: "o1"}}


def _status(
    pods: list[PodObservation],
    previous: InferenceServiceStatus | None = None,
    failures: dict[str, Failure] | None = None,
) -> InferenceServiceStatus:
    previous = previous or InferenceServiceStatus()
    records = {m.name: m for m in previous.models}
    plan = rollout.plan(SPEC.models, SNAPSHOT, records, pods)
    return service_status(
        "vision",
        "ml",
        1,
        SPEC,
        previous,
        plan,
        Observed(pods, DEPLOYMENT, REPO, failures or {}),
        ("http://vision.ml.svc:8000", "vision.ml.svc:8001"),
        "k=v",
        NOW,
        10,
    )


def _conditions(status: InferenceServiceStatus) -> dict[str, str]:
    return {c.type: c.status for c in status.conditions}


def test_everything_loaded_everywhere_is_ready_and_recorded() -> None:
    pods = [pod("p0", m={2: READY}, opt={1: READY}), pod("p1", m={2: READY}, opt={1: READY})]
    status = _status(pods)
    assert _conditions(status) == {
        "RepositoryReady": "True",
        "ServerAvailable": "True",
        "ModelsReady": "True",
        "Progressing": "False",
        "Servable": "True",
        "Ready": "True",
    }
    m = status.model("m")
    assert (
        m is not None and m.transition_status is TransitionStatus.UP_TO_DATE and m.state is ModelState.LOADED
    )
    assert (m.active_versions, m.default_version, m.content_hashes) == ([2], 2, {2: "h2"})
    assert m.copies.ready == 2 == m.copies.desired
    assert status.models_ready == "1/1" and status.phase is Phase.READY
    assert status.snapshot.active == "sha256:s1" and status.selector == "k=v"


def test_a_rollout_in_progress_is_servable_but_not_ready() -> None:
    previous = InferenceServiceStatus(models=[record("m", {1: "h1"})], snapshot={"active": "sha256:s0"})  # type: ignore[arg-type]
    pods = [pod("p0", m={1: READY, 2: READY}, opt={1: READY}), pod("p1", m={1: READY}, opt={1: READY})]
    status = _status(pods, previous)
    c = _conditions(status)
    assert c["Servable"] == "True" and c["Ready"] == "False" and c["Progressing"] == "True"
    m = status.model("m")
    assert m is not None and m.transition_status is TransitionStatus.IN_PROGRESS and m.active_versions == [1]
    assert status.snapshot.active == "sha256:s0" and status.snapshot.target == "sha256:s1"
    assert [r.state for r in m.replicas] == ["NotLoaded", "Ready"]  # the pod needing attention first


def test_a_failed_load_is_blocked_with_its_reason() -> None:
    previous = InferenceServiceStatus(models=[record("m", {1: "h1"})])
    pods = [
        pod("p0", m={1: READY}, opt={1: READY}),
        pod("p1", m={1: READY, 2: (FAILED, "boom")}, opt={1: READY}),
    ]
    failure = Failure(reason="ModelLoadFailed", message="boom", pod="p1", version=2, time=NOW)
    status = _status(pods, previous, {"m": failure})
    m = status.model("m")
    assert m is not None and m.transition_status is TransitionStatus.BLOCKED_BY_FAILED_LOAD
    assert m.blocked_hashes == {2: "h2"} and m.active_versions == [1] and m.last_failure == failure
    assert _conditions(status)["Servable"] == "True" and status.phase is Phase.DEGRADED
    # next pass: the block is remembered, nothing is retried, and status does not change
    again = _status(pods, status)
    assert again.model("m").transition_status is TransitionStatus.BLOCKED_BY_FAILED_LOAD  # type: ignore[union-attr]
    assert merge_patch(status.dump(), again.dump()) == {}


def test_a_version_unloaded_after_the_failure_does_not_replace_its_reason() -> None:
    """After a blocked load the server may list the failed version as UNAVAILABLE "unloaded" (the
    rollback's load dropped it): the status keeps the load error, not "unloaded"."""
    previous = InferenceServiceStatus(models=[record("m", {1: "h1"})])
    failed = [pod("p0", m={1: READY, 2: (FAILED, "boom")}, opt={1: READY})]
    failure = Failure(reason="ModelLoadFailed", message="boom", pod="p0", version=2, time=NOW)
    blocked = _status(failed, previous, {"m": failure})
    unloaded = [pod("p0", m={1: READY, 2: (FAILED, "unloaded")}, opt={1: READY})]
    later = _status(unloaded, blocked)
    m = later.model("m")
    assert m is not None and m.transition_status is TransitionStatus.BLOCKED_BY_FAILED_LOAD
    assert m.last_failure == failure
    assert [r.state for r in m.replicas] == ["Ready"]  # v1 still serves there


def test_optional_models_do_not_block_readiness() -> None:
    pods = [pod("p0", m={2: READY}, opt={1: (FAILED, "no")}), pod("p1", m={2: READY})]
    status = _status(pods)
    assert _conditions(status)["ModelsReady"] == "True"
    opt = status.model("opt")
    assert opt is not None and opt.state is ModelState.FAILED_TO_LOAD and opt.last_failure is not None


def test_no_pods_no_repository() -> None:
    plan = rollout.plan(SPEC.models, None, {}, [])
    status = service_status(
        "vision",
        "ml",
        1,
        SPEC,
        InferenceServiceStatus(),
        plan,
        Observed([], None, None, {}),
        ("u", "g"),
        "k=v",
        NOW,
        10,
    )
    c = {x.type: x for x in status.conditions}
    assert c["RepositoryReady"].reason == "NotFound" and c["Ready"].status == "False"
    assert status.phase is Phase.PENDING
    assert all(m.state is ModelState.PENDING for m in status.models)


def test_per_pod_detail_is_bounded() -> None:
    pods = [pod(f"p{i:02d}", m={2: READY}) for i in range(30)]
    status = service_status(
        "vision",
        "ml",
        1,
        SPEC,
        InferenceServiceStatus(),
        rollout.plan(SPEC.models, SNAPSHOT, {}, pods),
        Observed(pods, DEPLOYMENT, REPO, {}),
        ("u", "g"),
        "k=v",
        NOW,
        5,
    )
    m = status.model("m")
    assert m is not None and len(m.replicas) == 5 and m.copies.ready == 30


def test_steady_status_writes_nothing() -> None:
    pods = [pod("p0", m={2: READY}, opt={1: READY}), pod("p1", m={2: READY}, opt={1: READY})]
    first = _status(pods)
    assert merge_patch(first.dump(), _status(pods, first).dump()) == {}


def test_merge_patch() -> None:
    assert merge_patch({"a": 1, "b": {"c": 1, "d": 2}}, {"a": 1, "b": {"c": 2}}) == {"b": {"c": 2, "d": None}}
    assert merge_patch({"l": [1]}, {"l": [1, 2], "n": 0}) == {"l": [1, 2], "n": 0}


def test_children_are_written_only_on_change_or_drift() -> None:
    desired = stamp(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "s"},
            "spec": {"ports": [{"port": 8000}], "type": "ClusterIP"},
        }
    )
    observed = {
        **desired,
        "spec": {"ports": [{"port": 8000, "protocol": "TCP"}], "type": "ClusterIP", "clusterIP": "10.0.0.1"},
    }
    assert not needs_apply(desired, observed)  # server defaults are not drift
    assert needs_apply(desired, None)
    assert needs_apply(desired, {**observed, "spec": {**observed["spec"], "type": "NodePort"}})
    changed = stamp({**desired, "spec": {"ports": [{"port": 9000}]}})
    assert needs_apply(changed, observed)


def test_quantities_compare_by_value() -> None:
    assert contains({"cpu": "1", "memory": "1024Mi"}, {"cpu": "1000m", "memory": "1Gi"})
    assert not contains({"cpu": "2"}, {"cpu": "1000m"})
