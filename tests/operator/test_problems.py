"""Why pods do not run, read from pod objects and Events as the API server returns them, and how
status says it (conditions and ``models[].replicas[]``)."""

from __future__ import annotations

from typing import Any

import pytest
from naiad_operator.api.observed import DeploymentObservation, PodObservation, PodProblem
from naiad_operator.k8s.problems import pod_problem, waiting_for_volumes
from naiad_operator.reconcile import rollout
from naiad_operator.reconcile.service_status import Observed, service_status

from tests.operator.test_rollout import READY, pod
from tests.operator.test_status import DEPLOYMENT, NOW, REPO, SNAPSHOT, SPEC


def _pod(status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "vision-1"}, "status": status}


UNSCHEDULABLE = _pod(
    {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes "
                "are available: 3 No preemption victims found for incoming pod.",
            }
        ],
    }
)


def _waiting(reason: str, message: str = "", last: str = "", name: str = "server", init: bool = False) -> Any:
    status: dict[str, Any] = {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}
    if last:
        status["lastState"] = {"terminated": {"exitCode": 1, "message": last}}
    key = "initContainerStatuses" if init else "containerStatuses"
    return _pod({"phase": "Pending", key: [status]})


CREATING = _pod(
    {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [{"name": "server", "state": {"waiting": {"reason": "ContainerCreating"}}}],
    }
)


def _event(reason: str, message: str, at: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"reason": reason, "message": message, "lastTimestamp": at}


@pytest.mark.parametrize(
    ("obj", "events", "reason", "fragment"),
    [
        (UNSCHEDULABLE, [], "InsufficientGPU", "Insufficient nvidia.com/gpu"),
        (
            _pod(
                {
                    "conditions": [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
                        }
                    ]
                }
            ),
            [],
            "ClaimPending",
            "unbound immediate PersistentVolumeClaims",
        ),
        (
            _pod(
                {
                    "conditions": [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": "0/3 nodes are available: 3 node(s) had untolerated taint",
                        }
                    ]
                }
            ),
            [],
            "Unschedulable",
            "untolerated taint",
        ),
        (
            _waiting("ImagePullBackOff", 'Back-off pulling image "naiad/server:nope"'),
            [],
            "ImagePullBackOff",
            "naiad/server:nope",
        ),
        (
            _waiting("CrashLoopBackOff", "back-off 40s", "naiad serve: error: argument --log-verbose"),
            [],
            "CrashLoopBackOff",
            "argument --log-verbose",
        ),
        (
            _waiting("CrashLoopBackOff", "", "SnapshotMismatch: the source changed", "repository", True),
            [],
            "SnapshotMismatch",
            "the source changed",
        ),
        (
            CREATING,
            [_event("FailedMount", 'MountVolume.SetUp failed for volume "ca": secret "ca" not found')],
            "FailedMount",
            'secret "ca" not found',
        ),
        (
            CREATING,
            [
                _event(
                    "FailedAttachVolume",
                    'Multi-Attach error for volume "pvc-1" Volume is already used by pod(s) vision-0',
                )
            ],
            "MultiAttach",
            "already used by pod(s) vision-0",
        ),
    ],
)
def test_pod_problems(obj: dict[str, Any], events: list[Any], reason: str, fragment: str) -> None:
    problem = pod_problem(obj, events)
    assert problem is not None and problem.reason == reason and fragment in problem.message, problem


def test_starting_normally_is_no_problem() -> None:
    assert pod_problem(CREATING) is None
    assert pod_problem(_waiting("ContainerCreating")) is None
    assert (
        pod_problem(_pod({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]})) is None
    )


def test_events_are_read_only_for_pods_waiting_for_volumes() -> None:
    assert waiting_for_volumes(CREATING)
    assert not waiting_for_volumes(UNSCHEDULABLE)  # not scheduled: the condition says why
    assert not waiting_for_volumes(_pod({"phase": "Running"}))


def _service(pods: list[PodObservation], deployment: DeploymentObservation = DEPLOYMENT) -> Any:
    plan = rollout.plan(SPEC.models, SNAPSHOT, {}, pods)
    from naiad_operator.api.inferenceservice import InferenceServiceStatus

    return service_status(
        "vision",
        "ml",
        1,
        SPEC,
        InferenceServiceStatus(),
        plan,
        Observed(pods, deployment, REPO, {}),
        ("u", "g"),
        "k=v",
        NOW,
        10,
    )


GPU = PodProblem("InsufficientGPU", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")


def test_status_says_a_pod_cannot_be_scheduled() -> None:
    stuck = PodObservation("vision-1", None, False, problem=GPU)
    status = _service([pod("vision-0", m={2: READY}, opt={1: READY}), stuck])
    conditions = {c.type: c for c in status.conditions}
    assert conditions["ServerAvailable"].status == "True"
    assert "InsufficientGPU: pod vision-1: 0/3 nodes" in conditions["ServerAvailable"].message
    assert conditions["Ready"].reason == "InsufficientGPU"
    replicas = status.model("m").replicas
    assert replicas[0].pod == "vision-1" and replicas[0].state == "InsufficientGPU"
    assert "Insufficient nvidia.com/gpu" in (replicas[0].reason or "")


def test_status_says_no_pod_runs_and_why() -> None:
    crash = PodProblem("CrashLoopBackOff", "container server: naiad serve: error: bad flag")
    status = _service(
        [PodObservation("vision-0", None, False, problem=crash)],
        DeploymentObservation(
            replicas=1, ready_replicas=0, updated_replicas=1, generation=1, observed_generation=1
        ),
    )
    conditions = {c.type: c for c in status.conditions}
    assert (conditions["ServerAvailable"].status, conditions["ServerAvailable"].reason) == (
        "False",
        "CrashLoopBackOff",
    )
    assert "bad flag" in conditions["Ready"].message


def test_status_says_the_deployment_gave_up() -> None:
    stalled = DeploymentObservation(
        replicas=3,
        ready_replicas=2,
        updated_replicas=1,
        generation=2,
        observed_generation=2,
        stalled='ReplicaSet "vision-7f" has timed out progressing.',
    )
    pods = [pod("vision-0", m={2: READY}, opt={1: READY}), pod("vision-1", m={2: READY}, opt={1: READY})]
    conditions = {c.type: c for c in _service(pods, stalled).conditions}
    assert conditions["Progressing"].reason == "ProgressDeadlineExceeded"
    assert conditions["Ready"].reason == "ProgressDeadlineExceeded"
