"""The operator under traffic and faults (issue 20): GitOps rollouts with zero failed requests, and every
crash of the operator, a server pod or a sync Job survived.

Each scenario runs on the simulated cluster (KMock, real sync Jobs against SeaweedFS, real ``naiad serve``
pods), with the operator as its own process, while :class:`~tests.operator.load.Load` drives HTTP and
gRPC clients at the Service's ready endpoints from before the scenario until after it converged and
checks every answer's status and value (the value says which model version computed it).

Each test prints (and appends to ``$NAIAD_CHAOS_REPORT``) one line: requests sent, failed, and the time
from the change or fault until the end state was reached. ``make test`` runs the short profile;
``make test-operator-chaos`` the long one (all eight; every stage of scenario 5).
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.operator.chaos import LONG, Cutter, OperatorProcess, Scenario, timed
from tests.operator.cluster import NS, FakeCluster, ServerPod
from tests.operator.harness import events, eventually, index
from tests.operator.load import Answer, Load, ready_endpoints
from tests.support.kmock_k8s import ApiServer

CONVERGE = 120.0  # seconds: generous, the machine is shared; every wait returns as soon as state is reached

#: Scenarios only the long profile runs (``make test-operator-chaos``); ``make test`` keeps its budget with
#: scenario 1 and scenario 5 at one stage.
long_only = pytest.mark.skipif(not LONG, reason="long profile: make test-operator-chaos")


@pytest.fixture(scope="module")
def operator_a(
    s3: Any, api_server: ApiServer, cluster: FakeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    root = tmp_path_factory.mktemp("chaos")
    kubeconfig = api_server.kubeconfig(root / "kubeconfig")
    cluster.api.create(
        f"/api/v1/namespaces/{NS}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s3-creds", "namespace": NS},
            "stringData": s3.env(),
        },
    )
    operator = OperatorProcess(kubeconfig, root, "a").start()
    eventually(
        lambda: "leading as" in operator.output() or not operator.alive, CONVERGE, "the operator leads"
    )
    assert operator.alive, operator.output()[-3000:]
    yield operator
    operator.stop()


def report(line: str) -> None:
    print(line)
    path = os.environ.get("NAIAD_CHAOS_REPORT")
    if path:
        with open(path, "a") as out:
            out.write(line + "\n")


def serving(scenario: Scenario, pods: int, version: int) -> bool:
    """``pods`` ready endpoints, each holding exactly ``version`` READY (and nothing else READY)."""
    endpoints = ready_endpoints(scenario.api, scenario.selector)
    if len(endpoints) != pods:
        return False
    for endpoint in endpoints:
        versions = index(f"http://{endpoint.http}").get(scenario.model, {})
        if {v for v, s in versions.items() if s == "READY"} != {str(version)}:
            return False
    return True


def answered_everywhere(scenario: Scenario, version: int, since: float) -> Any:
    """A check for :meth:`Load.wait_for`: every ready pod answered ``version`` after ``since``."""

    def check(answers: list[Answer]) -> bool:
        pods = {e.pod for e in ready_endpoints(scenario.api, scenario.selector)}
        return pods <= {a.pod for a in answers if a.ok and a.version == version and a.sent > since}

    return check


def start_serving(scenario: Scenario, replicas: int) -> None:
    scenario.upload(1)
    scenario.create(replicas=replicas)
    try:
        eventually(lambda: serving(scenario, replicas, 1), CONVERGE, "v1 served by every pod")
    except AssertionError as exc:  # say where it stuck: repository, service, pods
        raise AssertionError(
            f"{exc}\nrepository: {scenario.repository()}\nservice: {scenario.service()}\n"
            f"pods: {[e.pod for e in ready_endpoints(scenario.api, scenario.selector)]}"
        ) from exc
    eventually(lambda: scenario.condition("Ready").get("status") == "True", CONVERGE, "service Ready")


def assert_monotonic(load: Load, skip: frozenset[str] | set[str] = frozenset()) -> None:
    """Per client and pod, answers move from v1 to v2 once and never back."""
    last: dict[tuple[str, str], int] = {}
    for answer in load.answers:
        if answer.ok and answer.version is not None and answer.pod not in skip:
            key = (answer.client, answer.pod)
            assert answer.version >= last.get(key, 0), f"{key} went back to v{answer.version}"
            last[key] = answer.version


# ---- 1. a new version rolls out under traffic --------------------------------------------------------


def test_new_version_rolls_out_without_a_failed_request(
    s3: Any, cluster: FakeCluster, operator_a: OperatorProcess
) -> None:
    scenario = Scenario(cluster.api, s3, "rollout")
    start_serving(scenario, 2)
    with Load(cluster.api, scenario.selector, scenario.model) as load:
        load.wait_for(answered_everywhere(scenario, 1, 0), CONVERGE, "v1 from every pod")
        scenario.upload(2, load_seconds=1.0)
        started = time.monotonic()
        scenario.trigger("v2")
        eventually(lambda: serving(scenario, 2, 2), CONVERGE, "v2 alone on every pod")
        eventually(lambda: scenario.record().get("activeVersions") == [2], CONVERGE, "status: v2 active")
        converged = timed(started)
        load.wait_for(answered_everywhere(scenario, 2, time.monotonic()), CONVERGE, "v2 from every pod")
    report(load.summary("1 new version", converged))
    assert load.failures() == [], load.failures()[:5]
    assert load.versions() == {1, 2}
    assert_monotonic(load)
    assert load.early(2) == [], load.early(2)[:5]
    scenario.delete()


# ---- 2. the new version fails to load: rolled back under traffic -----------------------------------------


@long_only
def test_failed_load_rolls_back_without_a_failed_request(
    s3: Any, cluster: FakeCluster, operator_a: OperatorProcess
) -> None:
    scenario = Scenario(cluster.api, s3, "rollback")
    start_serving(scenario, 2)
    with Load(cluster.api, scenario.selector, scenario.model) as load:
        load.wait_for(answered_everywhere(scenario, 1, 0), CONVERGE, "v1 from every pod")
        scenario.upload(2, load_seconds=0.5, fail=True)
        started = time.monotonic()
        scenario.trigger("v2")
        record = eventually(
            lambda: scenario.record().get("transitionStatus") == "BlockedByFailedLoad" and scenario.record(),
            CONVERGE,
            "status: blocked by the failed load",
        )
        eventually(lambda: serving(scenario, 2, 1), CONVERGE, "v1 alone READY on every pod")
        converged = timed(started)
        load.wait_for(answered_everywhere(scenario, 1, time.monotonic()), CONVERGE, "v1 from every pod after")
    report(load.summary("2 failed load, rollback", converged))
    assert load.failures() == [], load.failures()[:5]
    assert load.versions() == {1}
    assert "weights are corrupt" in record["lastFailure"]["message"] and record["lastFailure"]["version"] == 2
    assert record["activeVersions"] == [1] and record["defaultVersion"] == 1
    assert (
        scenario.condition("Servable")["status"] == "True"
        and scenario.condition("Ready")["status"] == "False"
    )
    scenario.delete()


# ---- 3. scale 1 -> 3 -> 1 through the scale subresource, under traffic -------------------------------------


@long_only
def test_scale_out_and_in_without_a_failed_request(
    s3: Any, cluster: FakeCluster, operator_a: OperatorProcess
) -> None:
    scenario = Scenario(cluster.api, s3, "scale")
    scenario.upload(1, exec_seconds=0.05)
    scenario.create(replicas=1)
    eventually(lambda: serving(scenario, 1, 1), CONVERGE, "v1 on the first pod")
    scale = f"/apis/serving.naiad.dev/v1alpha1/namespaces/{NS}/inferenceservices/{scenario.name}/scale"
    with Load(cluster.api, scenario.selector, scenario.model) as load:
        load.wait_for(answered_everywhere(scenario, 1, 0), CONVERGE, "v1 from the first pod")
        started = time.monotonic()
        cluster.api.patch(scale, {"spec": {"replicas": 3}})
        eventually(lambda: serving(scenario, 3, 1), CONVERGE, "three pods serving v1")
        eventually(lambda: scenario.service().get("readyReplicas") == 3, CONVERGE, "status: 3 ready")
        out = timed(started)
        load.wait_for(answered_everywhere(scenario, 1, time.monotonic()), CONVERGE, "v1 from all three")
        started = time.monotonic()
        cluster.api.patch(scale, {"spec": {"replicas": 1}})
        eventually(lambda: serving(scenario, 1, 1), CONVERGE, "one pod left")
        eventually(lambda: scenario.service().get("readyReplicas") == 1, CONVERGE, "status: 1 ready")
        back = timed(started)
        load.wait_for(answered_everywhere(scenario, 1, time.monotonic()), CONVERGE, "v1 from the last pod")
        going = [p for p in cluster.removed if p.name.startswith(f"{scenario.name}-")]
        eventually(lambda: all(p.process.poll() is not None for p in going), CONVERGE, "removed pods exited")
    report(load.summary(f"3 scale 1->3 ({out:.1f} s) ->1", back))
    assert load.failures() == [], load.failures()[:5]
    assert len({a.pod for a in load.answers if a.ok}) == 3  # the new pods took traffic
    scenario.delete()


# ---- 4. S3 unreachable in the middle of a sync -------------------------------------------------------------


@long_only
def test_source_cut_mid_sync_keeps_serving_and_retries(
    s3: Any, cluster: FakeCluster, operator_a: OperatorProcess
) -> None:
    proxy = Cutter(s3.endpoint)
    scenario = Scenario(cluster.api, s3, "outage")
    scenario.upload(1)
    scenario.create(replicas=2, endpoint=proxy.endpoint)
    eventually(lambda: serving(scenario, 2, 1), CONVERGE, "v1 on every pod")
    before = scenario.repository()["snapshot"]["current"]
    with Load(cluster.api, scenario.selector, scenario.model) as load:
        load.wait_for(answered_everywhere(scenario, 1, 0), CONVERGE, "v1 from every pod")
        scenario.upload(2, weights=4 << 20)
        proxy.arm(after_bytes=1 << 20)  # a megabyte into the weights, the connection is reset
        started = time.monotonic()
        scenario.trigger("v2")
        assert proxy.stalled.wait(CONVERGE), "the sync never reached the weights"
        failed = eventually(
            lambda: (
                (scenario.repository().get("lastSync") or {}).get("result") == "Failed"
                and scenario.repository()
            ),
            CONVERGE,
            "status: the sync failed",
        )
        assert failed["snapshot"]["current"] == before
        synced = scenario.condition("Synced", "modelrepositories")
        reachable = scenario.condition("SourceReachable", "modelrepositories")
        retried = eventually(
            lambda: (
                scenario.repository().get("syncCount", 0) >= failed["syncCount"] + 1
                and scenario.repository()["syncCount"]
            ),
            CONVERGE,
            "a retry while S3 is still down",
        )
        assert scenario.repository()["snapshot"]["current"] == before
        proxy.restore()
        restored = time.monotonic()
        eventually(
            lambda: scenario.repository()["snapshot"]["current"] != before, CONVERGE, "the retry synced"
        )
        eventually(lambda: serving(scenario, 2, 2), CONVERGE, "v2 on every pod")
        converged, recovered = timed(started), timed(restored)
        load.wait_for(answered_everywhere(scenario, 2, time.monotonic()), CONVERGE, "v2 from every pod")
    proxy.close()
    report(
        load.summary(f"4 S3 cut mid-sync ({retried} syncs, {recovered:.1f} s after S3 was back)", converged)
    )
    assert load.failures() == [], load.failures()[:5]
    assert load.versions() == {1, 2}
    assert synced["status"] == "False" and synced["reason"] == "SyncFailed", synced
    assert reachable["status"] == "False" and reachable["reason"] == "SourceUnreachable", reachable
    assert_monotonic(load)
    scenario.delete()


# ---- 6. a server pod SIGKILLed in the middle of a rollout -------------------------------------------------


@long_only
def test_pod_killed_mid_rollout_comes_back_with_exactly_its_models(
    s3: Any, cluster: FakeCluster, operator_a: OperatorProcess
) -> None:
    scenario = Scenario(cluster.api, s3, "podkill")
    scenario.upload(1, model="unlisted")
    start_serving(scenario, 2)
    with Load(cluster.api, scenario.selector, scenario.model) as load:
        load.wait_for(answered_everywhere(scenario, 1, 0), CONVERGE, "v1 from every pod")
        scenario.upload(2, load_seconds=3.0)
        started = time.monotonic()
        scenario.trigger("v2")
        survivor, victim = cluster.pods[scenario.name]
        eventually(
            lambda: "2" in index(survivor.url).get(scenario.model, {}), CONVERGE, "the rollout loading v2"
        )
        killed = time.monotonic()
        os.killpg(victim.process.pid, signal.SIGKILL)
        eventually(
            lambda: cluster.pods[scenario.name][1].restarts == victim.restarts + 1, CONVERGE, "restarted"
        )
        eventually(lambda: serving(scenario, 2, 2), CONVERGE, "v2 alone on both pods")
        eventually(lambda: scenario.record().get("activeVersions") == [2], CONVERGE, "status: v2 active")
        converged = timed(started)
        load.wait_for(answered_everywhere(scenario, 2, time.monotonic()), CONVERGE, "v2 from both pods")
    report(load.summary("6 pod SIGKILLed mid-rollout", converged))
    restarted = cluster.pods[scenario.name][1]
    assert restarted.name == victim.name and restarted.process.pid != victim.process.pid
    # explicit mode: the model the service does not list stays unloaded on the restarted pod
    assert index(restarted.url)["unlisted"] == {}
    ready = {v for v, s in index(restarted.url)[scenario.model].items() if s == "READY"}
    assert ready == {"2"} and scenario.record()["defaultVersion"] == 2
    loads = [
        e for e in events(cluster.api, "ModelLoaded") if f"pod {victim.name}," in e or e.endswith(victim.name)
    ]
    assert all(e.startswith(f"{scenario.model} ") for e in loads), loads
    # only the killed pod failed requests, and only between its death and its return
    ready_again = restarted.ready_at or time.monotonic()
    for answer in load.failures():
        assert answer.pod == victim.name and killed - 1 <= answer.sent <= ready_again, answer
    # no pod answered v2 before v2 was READY everywhere: not even the restarted container, which starts
    # on the repository's newest content but joins the endpoints only once the operator loaded on it what
    # the fleet serves (its readiness gate)
    assert load.early(2) == []
    assert_monotonic(load)
    scenario.delete()


# ---- 8. a sync Job killed mid-way ------------------------------------------------------------------------


@long_only
def test_sync_job_killed_mid_way_never_becomes_current(
    s3: Any, cluster: FakeCluster, operator_a: OperatorProcess
) -> None:
    proxy = Cutter(s3.endpoint)
    scenario = Scenario(cluster.api, s3, "jobkill")
    scenario.upload(1)
    scenario.create(replicas=1, endpoint=proxy.endpoint)
    eventually(lambda: serving(scenario, 1, 1), CONVERGE, "v1 served")
    before = scenario.repository()["snapshot"]["current"]
    claim = cluster.claim_dir(scenario.repository()["claimName"])
    current_before = os.readlink(claim / "current")
    with Load(cluster.api, scenario.selector, scenario.model) as load:
        load.wait_for(answered_everywhere(scenario, 1, 0), CONVERGE, "v1 answers")
        scenario.upload(2, weights=4 << 20)
        proxy.arm(after_bytes=1 << 20, stall=True)  # the copy hangs a megabyte into the weights
        started = time.monotonic()
        scenario.trigger("v2")
        assert proxy.stalled.wait(CONVERGE), "the sync never reached the weights"
        job = scenario.repository()["activeJob"]
        process = eventually(lambda: cluster.job_processes.get(job), CONVERGE, "the Job's process")
        os.killpg(process.pid, signal.SIGKILL)
        failed = eventually(
            lambda: (
                (scenario.repository().get("lastSync") or {}).get("jobName") == job
                and scenario.repository()["lastSync"].get("result") == "Failed"
                and scenario.repository()
            ),
            CONVERGE,
            "status: the killed sync failed",
        )
        assert failed["snapshot"]["current"] == before and os.readlink(claim / "current") == current_before
        proxy.restore()
        eventually(
            lambda: scenario.repository()["snapshot"]["current"] != before, CONVERGE, "the retry synced"
        )
        eventually(lambda: serving(scenario, 1, 2), CONVERGE, "v2 served")
        converged = timed(started)
        load.wait_for(answered_everywhere(scenario, 2, time.monotonic()), CONVERGE, "v2 answers")
    proxy.close()
    report(load.summary("8 sync Job killed mid-way", converged))
    assert load.failures() == [], load.failures()[:5]
    retry = scenario.repository()["lastSync"]
    assert retry["jobName"] != job and retry["result"] == "Succeeded"
    current = claim / "current" / scenario.model / "2"
    assert (current / "weights.bin").stat().st_size == 4 << 20 and (current / "model.py").exists()
    scenario.delete()


# ---- 5. the operator SIGKILLed at each stage of a rollout ------------------------------------------------

#: Stage -> a check on (scenario, from version, to version, traffic) that is true once the rollout is
#: there; the operator is killed the moment it is.
STAGES: dict[str, Any] = {
    "after sync": lambda sc, a, b, load: sc.repository()["snapshot"]["current"] != sc.snapshot_before,
    "during load": lambda sc, a, b, load: any(
        index(f"http://{e.http}").get(sc.model, {}).get(str(b)) not in (None, "READY")
        for e in ready_endpoints(sc.api, sc.selector)
    ),
    "after pin": lambda sc, a, b, load: any(x.version == b for x in load.answers[-50:] if x.ok),
    "during unload": lambda sc, a, b, load: any(
        index(f"http://{e.http}").get(sc.model, {}).get(str(a)) != "READY"
        and index(f"http://{e.http}").get(sc.model, {}).get(str(b)) == "READY"
        for e in ready_endpoints(sc.api, sc.selector)
    ),
}


def test_operator_killed_at_each_stage_converges_to_the_same_end(
    s3: Any, cluster: FakeCluster, operator_a: OperatorProcess
) -> None:
    scenario = Scenario(cluster.api, s3, "opkill")
    start_serving(scenario, 2)
    stages = list(STAGES) if LONG else ["during load"]
    with Load(cluster.api, scenario.selector, scenario.model) as load:
        load.wait_for(answered_everywhere(scenario, 1, 0), CONVERGE, "v1 from every pod")
        times = [
            _rollout_killing_the_operator(scenario, load, operator_a, stage, n + 1, cluster)
            for n, stage in enumerate(stages)
        ]
    report(load.summary(f"5 operator SIGKILLed {', '.join(stages)} ({len(stages)} rollouts)", max(times)))
    assert load.failures() == [], load.failures()[:5]
    assert_monotonic(load)
    scenario.delete()


def _rollout_killing_the_operator(
    scenario: Scenario, load: Load, operator: OperatorProcess, stage: str, a: int, cluster: FakeCluster
) -> float:
    """Roll v``a`` -> v``a+1``, SIGKILL the operator once the rollout reached ``stage``, restart it;
    the seconds from the trigger until every pod and status show the end state.

    Each pod's own log of completed loads must read: the union loaded (old default pinned), the new
    default pinned (a no-op load, may be skipped when the Load stage already pinned it), only the new
    version kept; at most one load repeated by the restarted operator, never a return to the old
    default and nothing missed."""
    b = a + 1
    marks = {p.name: len(loads_of(p, scenario.model)) for p in cluster.pods[scenario.name]}
    scenario.snapshot_before = scenario.repository()["snapshot"]["current"]
    scenario.upload(b, load_seconds=2.0)
    started = time.monotonic()
    scenario.trigger(f"v{b}")
    eventually(lambda: STAGES[stage](scenario, a, b, load), CONVERGE, f"the rollout {stage}")
    operator.kill()
    operator.start()
    eventually(lambda: serving(scenario, 2, b), CONVERGE, f"v{b} alone on every pod")
    eventually(
        lambda: (
            scenario.record().get("activeVersions") == [b]
            and scenario.record().get("transitionStatus") == "UpToDate"
        ),
        CONVERGE,
        f"status: v{b} active",
    )
    converged = timed(started)
    load.wait_for(answered_everywhere(scenario, b, time.monotonic()), CONVERGE, f"v{b} from every pod")
    record = scenario.record()
    hashes = {
        str(v["version"]): v["contentHash"]
        for m in scenario.repository()["models"]
        if m["name"] == scenario.model
        for v in m["versions"]
    }
    assert record["defaultVersion"] == b and record["contentHashes"] == {str(b): hashes[str(b)]}
    assert record["copies"] == {"desired": 2, "ready": 2, "loading": 0, "failed": 0}, record
    for pod in cluster.pods[scenario.name]:
        done = loads_of(pod, scenario.model)[marks[pod.name] :]
        distinct = [s for n, s in enumerate(done) if n == 0 or done[n - 1] != s]
        assert distinct == [f"{a}, {b}", f"{b}"] and len(done) <= 4, (stage, pod.name, done)
    return converged


def loads_of(pod: ServerPod, model: str) -> list[str]:
    """The version sets of every load of ``model`` the pod completed, from its own log."""
    return re.findall(rf"successfully loaded '{model}' version\(s\) ([0-9, ]*[0-9])", pod.log.read_text())


# ---- 7. two operator replicas: one acts, the other takes over when it dies ----------------------------------


def lease(api: Any) -> dict[str, Any]:
    found = api.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/naiad-operator") or {}
    return dict(found.get("spec") or {})


@long_only
def test_two_replicas_one_acts_the_other_takes_over(
    s3: Any, cluster: FakeCluster, operator_a: OperatorProcess, api_server: ApiServer, tmp_path: Any
) -> None:
    eventually(lambda: lease(cluster.api).get("holderIdentity") == "a", CONVERGE, "a leads")
    standby = OperatorProcess(api_server.kubeconfig(tmp_path / "kubeconfig"), tmp_path, "b").start()
    try:
        eventually(lambda: "waiting for Lease" in standby.output(), CONVERGE, "b started and waits")
        scenario = Scenario(cluster.api, s3, "peers")
        start_serving(scenario, 2)  # done by a alone
        assert lease(cluster.api)["holderIdentity"] == "a" and standby.alive
        assert "leading as" not in standby.output() and "Handler" not in standby.output()
        transitions = int(lease(cluster.api).get("leaseTransitions") or 0)
        with Load(cluster.api, scenario.selector, scenario.model) as load:
            load.wait_for(answered_everywhere(scenario, 1, 0), CONVERGE, "v1 from every pod")
            killed = time.monotonic()
            operator_a.kill()
            eventually(lambda: lease(cluster.api).get("holderIdentity") == "b", CONVERGE, "b takes over")
            takeover = timed(killed)
            assert int(lease(cluster.api)["leaseTransitions"]) == transitions + 1
            scenario.upload(2)
            started = time.monotonic()
            scenario.trigger("v2")  # the new leader rolls it out
            eventually(lambda: serving(scenario, 2, 2), CONVERGE, "v2 alone on every pod")
            eventually(lambda: scenario.record().get("activeVersions") == [2], CONVERGE, "status: v2 active")
            converged = timed(started)
            load.wait_for(answered_everywhere(scenario, 2, time.monotonic()), CONVERGE, "v2 from every pod")
            operator_a.start()  # back as the standby
            eventually(lambda: operator_a.output().count("waiting for Lease") >= 2, CONVERGE, "a waits")
        report(load.summary(f"7 leader SIGKILLed, standby took over in {takeover:.1f} s", converged))
        assert load.failures() == [], load.failures()[:5]
        assert lease(cluster.api)["holderIdentity"] == "b"
        assert operator_a.output().split("---- start")[-1].count("leading as") == 0
        scenario.delete()
    finally:
        standby.stop()
    eventually(
        lambda: lease(cluster.api).get("holderIdentity") in ("", "a"), CONVERGE, "b handed the Lease over"
    )
    eventually(lambda: "leading as" in operator_a.output().split("---- start")[-1], CONVERGE, "a leads again")
