"""Canary and shadow rollouts under traffic, on the simulated cluster (real ``naiad serve`` pods, real
tritonclient clients over HTTP and gRPC, ``load.py``), and one slow rollout beside a quick one.

Every model answers ``input + 1000 * version`` (``load.versioned_py``), so each answer says which version
computed it: the tests check the share each version served during each canary step, that a failing
canary's errors all came from the new version and stopped with the rollback, that a mirror never
changes an answer, and what every pod has loaded; status and Events are checked for the evidence.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.operator.cluster import NS, Api, FakeCluster
from tests.operator.harness import (
    BUCKET,
    GROUP_PATH,
    create_s3_repository,
    events,
    eventually,
    index,
    ready_versions,
    status_of,
    trigger_sync,
)
from tests.operator.load import Answer, Load, versioned_py
from tests.support.models import identity_config

#: v2 of a model that answers every request with an error naming its version.
ERRORING_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = args["model_version"]

    def execute(self, requests):
        raise pb_utils.TritonModelException(f"version {self.version} answers with an error")
"""
SERVICE = "traffic"
SELECTOR = {"serving.naiad.dev/inferenceservice": SERVICE}
#: How far a step's observed share may be from its weight (a few hundred answers per step).
TOLERANCE = 0.12
#: Seconds cut from each end of a step's window: the weights change on the pods a moment before status
#: says so (the same pass), and answers in flight straddle the change.
EDGE = 0.7


def upload(s3: Any, model: str, version: int, source: str) -> None:
    client = s3.client()
    client.put_object(
        Bucket=BUCKET, Key=f"triton/{model}/config.pbtxt", Body=identity_config(model, "TYPE_FP32").encode()
    )
    client.put_object(Bucket=BUCKET, Key=f"triton/{model}/{version}/model.py", Body=source.encode())


def service(name: str, models: list[dict[str, Any]], replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "serving.naiad.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"repository": {"name": "models"}, "models": models, "replicas": replicas},
    }


def record(api: Api, isvc: str, model: str) -> dict[str, Any]:
    return next(
        (m for m in status_of(api, "inferenceservices", isvc).get("models") or [] if m["name"] == model), {}
    )


def pod_urls(cluster: FakeCluster, isvc: str) -> list[str]:
    return [p.url for p in cluster.pods.get(isvc, []) if p.ready]


def served(url: str) -> tuple[tuple[int, ...], ...]:
    """The versions READY on one pod of each of the service's three models."""
    return tuple(ready_versions(url, m) for m in ("good", "bad", "shadow"))


def up_to_date(api: Api, isvc: str, model: str, versions: list[int]) -> bool:
    entry = record(api, isvc, model)
    return entry.get("transitionStatus") == "UpToDate" and entry.get("activeVersions") == versions


@dataclass
class Steps:
    """When status showed each canary step begin (test clock), and when the canary ended."""

    began: list[float]
    ended: float | None = None
    canary: dict[str, Any] | None = None


def watch_canaries(api: Api, until: dict[str, str], timeout: float) -> dict[str, Steps]:
    """Poll status until each model's canary reaches its phase in ``until``, noting when each step began."""
    seen = {model: Steps([]) for model in until}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for model, phase in until.items():
            steps = seen[model]
            canary = record(api, SERVICE, model).get("canary") or {}
            while canary.get("phase") and len(steps.began) < len(canary.get("steps") or []):
                steps.began.append(time.monotonic())
            if steps.ended is None and canary.get("phase") == phase:
                steps.ended, steps.canary = time.monotonic(), canary
        if all(s.ended is not None for s in seen.values()):
            return seen
        time.sleep(0.1)
    raise AssertionError(f"canaries never reached {until}: {[record(api, SERVICE, m) for m in until]}")


def share(answers: list[Answer], start: float, end: float, version: int) -> tuple[float, int]:
    window = [a for a in answers if a.ok and start + EDGE <= a.sent and a.done <= end - EDGE]
    if not window:
        return 0.0, 0
    return sum(a.version == version for a in window) / len(window), len(window)


@pytest.fixture(scope="module")
def serving(s3: Any, cluster: FakeCluster, operator: Any) -> Iterator[Api]:
    """One InferenceService, two pods, three models on v1: ``good`` and ``bad`` roll out by canary,
    ``shadow`` serves v1 and mirrors half its traffic to an erroring v2."""
    api = cluster.api
    for model in ("good", "bad", "shadow"):
        upload(s3, model, 1, versioned_py())
    upload(s3, "shadow", 2, ERRORING_PY)
    create_s3_repository(api, s3, {"mode": "shared", "accessModes": ["ReadWriteMany"]})
    canary = {"strategy": "canary", "pauseSeconds": 3, "analysis": {"maxErrorRate": 0.05}}
    api.create(
        f"{GROUP_PATH}/inferenceservices",
        service(
            SERVICE,
            [
                {"name": "good", "rollout": {**canary, "steps": [25, 75]}},
                {"name": "bad", "rollout": {**canary, "steps": [30, 100]}},
                {
                    "name": "shadow",
                    "versionPolicy": {"specific": {"versions": [1]}},
                    "mirror": {"version": 2, "percent": 50},
                },
            ],
            replicas=2,
        ),
    )
    eventually(
        lambda: (
            all(up_to_date(api, SERVICE, m, [1]) for m in ("good", "bad"))
            and up_to_date(api, SERVICE, "shadow", [1, 2])
            and len(pod_urls(cluster, SERVICE)) == 2
            and all(served(u) == ((1,), (1,), (1, 2)) for u in pod_urls(cluster, SERVICE))
        ),
        120,
        "the service serving v1 of every model on two pods",
    )
    yield api


def test_a_mirror_shadows_a_failing_version_without_changing_an_answer(
    serving: Api, cluster: FakeCluster
) -> None:
    api = serving
    for url in pod_urls(cluster, SERVICE):
        assert ready_versions(url, "shadow") == (1, 2)
    with Load(api, SELECTOR, "shadow", http_clients=1, grpc_clients=1) as load:
        eventually(
            lambda: (
                (record(api, SERVICE, "shadow").get("mirror") or {}).get("evidence", {}).get("errors", 0)
                >= 20
            ),
            60,
            "the mirror's errors in status",
        )
    assert load.answers and not load.failures(), load.failures()[:3]
    assert load.versions() == {1}
    mirror = record(api, SERVICE, "shadow")["mirror"]
    assert (mirror["version"], mirror["percent"]) == (2, 50)
    evidence = mirror["evidence"]
    assert evidence["requests"] == evidence["errors"] and evidence["errorRate"] == 1.0
    # about half of the client's requests were shadowed, once the status (which lags the last answers:
    # it read 25 of 86 once, CI 7cc6c60) has caught up with them
    answered = len(load.answers)

    def shadowed() -> int:
        return int(record(api, SERVICE, "shadow")["mirror"]["evidence"]["requests"])

    eventually(lambda: shadowed() >= 0.3 * answered, 60, "the mirror's evidence catching up")
    assert 0.3 * answered <= shadowed() <= 0.7 * answered + 20


def test_canary_steps_move_traffic_and_a_failing_canary_rolls_back(
    s3: Any, serving: Api, cluster: FakeCluster
) -> None:
    api = serving
    upload(s3, "good", 2, versioned_py())
    upload(s3, "bad", 2, ERRORING_PY)
    with (
        Load(api, SELECTOR, "good", http_clients=1, grpc_clients=1) as good,
        Load(api, SELECTOR, "bad", http_clients=1, grpc_clients=1) as bad,
    ):
        trigger_sync(api, "canary")
        watched = watch_canaries(api, {"good": "Promoted", "bad": "Aborted"}, 120)
        good_steps, good_canary = watched["good"], watched["good"].canary or {}
        bad_canary = watched["bad"].canary or {}
        eventually(lambda: up_to_date(api, SERVICE, "good", [2]), 60, "good promoted to v2 everywhere")
        eventually(
            lambda: all(ready_versions(u, "bad") == (1,) for u in pod_urls(cluster, SERVICE)),
            60,
            "bad's v2 unloaded from every pod",
        )
        rolled_back = time.monotonic()
        # answers from well after the promotion, however fast the rest went
        settled = good_steps.ended + 2.5 if good_steps.ended is not None else 0.0
        time.sleep(max(1.0, settled - time.monotonic()))

    # the good canary: each step's share of v2 follows its weight, nothing failed, then v2 serves all
    assert not good.failures(), good.failures()[:3]
    steps = good_canary["steps"]
    assert [s["weight"] for s in steps] == [25, 75] and all(s["verdict"] == "Passed" for s in steps)
    assert good_steps.ended is not None
    bounds = [*good_steps.began, good_steps.ended]
    for n, weight in enumerate((25, 75)):
        seen, count = share(good.answers, bounds[n], bounds[n + 1], 2)
        assert count >= 30, f"step {n + 1}: only {count} answers in its window"
        assert abs(seen - weight / 100) <= TOLERANCE, f"step {n + 1}: v2 served {seen:.0%}, weight {weight}%"
        recorded = steps[n]
        assert recorded["evidence"]["requests"] > 0 and recorded["evidence"]["errors"] == 0
        assert abs(recorded["share"] - weight / 100) <= TOLERANCE, recorded
    assert {a.version for a in good.answers if a.ok and a.sent > good_steps.ended + 1.0} == {2}
    assert any("step 2/2" in m for m in events(api, "CanaryStep"))
    assert any(m.startswith("good: version 2 at 75%") for m in events(api, "CanaryPromoted"))

    # the failing canary: aborted at its first step, every failure was v2's, none after the rollback
    assert bad_canary["steps"][0]["verdict"] == "Failed" and len(bad_canary["steps"]) == 1
    assert bad_canary["steps"][0]["evidence"]["errorRate"] == 1.0
    failures = bad.failures()
    assert failures, "the failing version never answered"
    assert all("version 2 answers with an error" in a.error for a in failures), failures[:3]
    assert {a.version for a in bad.answers if a.ok} == {1}
    assert not [a for a in failures if a.sent > rolled_back], "failures after the rollback"
    entry = record(api, SERVICE, "bad")
    assert entry["transitionStatus"] == "BlockedByFailedLoad" and entry["activeVersions"] == [1]
    assert entry["lastFailure"]["reason"] == "CanaryAnalysisFailed"
    assert any("rolling back to version 1" in m for m in events(api, "CanaryAborted"))


def test_a_slow_rollout_holds_up_no_other_service_and_yields_to_a_spec_change(
    s3: Any, serving: Api, cluster: FakeCluster
) -> None:
    """Two services on one repository: a sync brings both a new version; one loads for a long time.
    The other converges while that load is still running, and a spec change on the slow one takes effect
    without waiting for its load either."""
    api = serving
    upload(s3, "quick", 1, versioned_py())
    upload(s3, "slow", 1, versioned_py())
    trigger_sync(api, "two-services")
    eventually(
        lambda: (
            {"quick", "slow"}
            <= {m["name"] for m in status_of(api, "modelrepositories", "models").get("models") or []}
        ),
        60,
        "both models in the repository",
    )
    api.create(f"{GROUP_PATH}/inferenceservices", service("quick", [{"name": "quick"}], 1))
    api.create(f"{GROUP_PATH}/inferenceservices", service("slow", [{"name": "slow"}], 1))
    eventually(
        lambda: up_to_date(api, "quick", "quick", [1]) and up_to_date(api, "slow", "slow", [1]),
        90,
        "both services on v1",
    )
    upload(s3, "quick", 2, versioned_py())
    upload(s3, "slow", 2, versioned_py(load_seconds=30))
    trigger_sync(api, "slow-and-quick")
    # status may say UpToDate a moment before the simulated kubelet counts the pod Ready (gate opened)
    eventually(lambda: len(pod_urls(cluster, "slow")) == 1, 25, "the slow service's pod Ready")
    (slow_pod,) = pod_urls(cluster, "slow")
    eventually(lambda: index(slow_pod).get("slow", {}).get("2") == "LOADING", 25, "the slow load begun")
    eventually(lambda: up_to_date(api, "quick", "quick", [2]), 25, "the quick service on v2")
    assert index(slow_pod)["slow"].get("2") == "LOADING", "the slow load finished first: nothing was shown"
    api.patch(
        f"{GROUP_PATH}/inferenceservices/slow",
        {"spec": {"models": [{"name": "slow", "versionPolicy": {"specific": {"versions": [1]}}}]}},
    )
    generation = api.get(f"{GROUP_PATH}/inferenceservices/slow")["metadata"]["generation"]
    eventually(
        lambda: (
            status_of(api, "inferenceservices", "slow").get("observedGeneration") == generation
            and up_to_date(api, "slow", "slow", [1])
        ),
        25,
        "the slow service's new spec in status: v1 only",
    )
    assert index(slow_pod)["slow"].get("2") == "LOADING", "the spec change waited for the slow load"


def test_a_long_canary_pause_is_no_sleep_and_a_spec_change_replans_it(s3: Any, serving: Api) -> None:
    """A canary held for an hour holds nothing: shortening the pause in the spec promotes it at once."""
    api = serving
    path = f"{GROUP_PATH}/inferenceservices/paused"
    hour = {"strategy": "canary", "steps": [50], "pauseSeconds": 3600}
    upload(s3, "paused", 1, versioned_py())
    trigger_sync(api, "paused-v1")
    eventually(
        lambda: (
            "paused" in {m["name"] for m in status_of(api, "modelrepositories", "models").get("models") or []}
        ),
        60,
        "the model in the repository",
    )
    api.create(f"{GROUP_PATH}/inferenceservices", service("paused", [{"name": "paused", "rollout": hour}], 1))
    eventually(lambda: up_to_date(api, "paused", "paused", [1]), 90, "the service on v1")
    upload(s3, "paused", 2, versioned_py())
    trigger_sync(api, "paused-v2")
    eventually(
        lambda: (record(api, "paused", "paused").get("canary") or {}).get("toVersion") == 2,
        60,
        "the canary of v2 at its first step",
    )
    assert record(api, "paused", "paused")["canary"]["phase"] == "Progressing"
    api.patch(path, {"spec": {"models": [{"name": "paused", "rollout": {**hour, "pauseSeconds": 1}}]}})
    eventually(lambda: up_to_date(api, "paused", "paused", [2]), 30, "v2 promoted after the shorter pause")
    canary = record(api, "paused", "paused")["canary"]
    assert canary["phase"] == "Promoted" and canary["steps"][0]["verdict"] == "Passed"
