"""A rollout with no ``rollout.strategy`` picks ``perPod`` or ``both`` from what the pods measured (issue 23).

The model holds a known ballast in its model process, so each pod's ``nv_model_loaded_memory_bytes`` for
it is real and large; the server container's memory limit is set so that one copy fits and two do not
(``perPod``: no pod may ever hold the old and the new version at once), or so that two fit (``both``: the
new version loads beside the old). The new version is rolled out GitOps-style, by a change of the pinned
version in the InferenceService's spec, under traffic. Checked against the pods themselves: their
repository indexes sampled throughout, their answers, and the per-pod Events; then the status.

The simulated kubelet does not enforce memory limits: the limit only feeds the operator's choice, which
is what is under test.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.operator.chaos import Scenario
from tests.operator.cluster import NS, FakeCluster
from tests.operator.harness import eventually, post
from tests.operator.load import Load, ready_endpoints, versioned_py
from tests.operator.test_gitops import CONVERGE, _create, _patch_models, _setup
from tests.support.kmock_k8s import ApiServer
from tests.support.models import identity_config

BALLAST = 64 << 20
"""Bytes each instance writes at load: with the model process's interpreter, one copy measures ~90 MiB."""

HOLDING = ("READY", "LOADING", "UNLOADING")
"""States in which a version's instances (and their memory) exist on the server."""


def _upload(scenario: Scenario, version: int) -> None:
    client = scenario.s3.client()
    prefix = f"{scenario.prefix}/{scenario.model}"
    config = identity_config(scenario.model, "TYPE_FP32")
    client.put_object(Bucket="models", Key=f"{prefix}/config.pbtxt", Body=config.encode())
    source = versioned_py(load_seconds=0.5, ballast=BALLAST)  # seen LOADING; answers show the version
    client.put_object(Bucket="models", Key=f"{prefix}/{version}/model.py", Body=source.encode())


def _states(url: str, model: str) -> dict[int, tuple[str, int]]:
    """version -> (state, measured memory bytes), from the pod's own repository index."""
    return {
        int(e["version"]): (e["state"], int(e.get("memory_bytes") or 0))
        for e in post(f"{url}/v2/repository/index", {"memory_bytes": True})
        if e["name"] == model and e.get("version")
    }


class Watcher:
    """Samples what every pod of the scenario holds of its model, as fast as the pods answer."""

    def __init__(self, cluster: FakeCluster, scenario: Scenario) -> None:
        self.cluster, self.scenario = cluster, scenario
        self.samples: list[tuple[str, dict[int, str]]] = []
        self.strategies: list[str | None] = []
        """The strategy the service's status named, sampled as often."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="holdings")

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self.strategies.append(self.scenario.record().get("strategy"))
            except OSError:
                pass
            for pod in list(self.cluster.pods.get(self.scenario.name, [])):
                try:
                    states = _states(pod.url, self.scenario.model)
                except OSError:
                    continue
                self.samples.append((pod.name, {v: s for v, (s, _) in states.items()}))

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def held_both(self, old: int, new: int) -> list[tuple[str, dict[int, str]]]:
        """Samples where a pod held ``old`` and ``new`` at once (instances of both in memory)."""
        return [
            (pod, states)
            for pod, states in self.samples
            if states.get(old) in HOLDING and states.get(new) in HOLDING
        ]


def _per_pod_events(scenario: Scenario) -> dict[str, str]:
    """The ``PerPodRollout`` Events of the scenario's service (a pod taken out of the endpoints), by name."""
    return {
        e["metadata"]["name"]: e.get("message", "")
        for e in scenario.api.items(f"/api/v1/namespaces/{NS}/events")
        if e.get("reason") == "PerPodRollout" and (e.get("involvedObject") or {}).get("name") == scenario.name
    }


CASES = ((128, "perPod"), (1024, "both"))
"""(memory limit in MiB, the strategy a model measured at ~90 MiB must get under it)."""


def test_unset_strategy_follows_the_measured_footprint(
    s3: Any, api_server: ApiServer, cluster: FakeCluster, operator: Any
) -> None:
    """Two services side by side, the same model and rollout under different limits: 128 MiB, where two
    copies do not fit, and 1 GiB, where they do (run together to save time: each waits on its own pods)."""
    _setup(cluster, s3)
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(_roll_out, cluster, s3, mib, strategy) for mib, strategy in CASES]
        for run in runs:
            run.result()


def _roll_out(cluster: FakeCluster, s3: Any, limit_mib: int, strategy: str) -> None:
    scenario = Scenario(cluster.api, s3, f"weigh-{strategy.lower()}")
    _upload(scenario, 1)
    _upload(scenario, 2)
    pinned = {"name": scenario.model, "versionPolicy": {"specific": {"versions": [1]}}}
    server = {"resources": {"limits": {"memory": f"{limit_mib}Mi"}}}
    _create(scenario, [pinned], server=server)

    def settled(version: int) -> bool:
        pods = cluster.pods.get(scenario.name, [])
        if len(pods) != 2 or len(ready_endpoints(scenario.api, scenario.selector)) != 2:
            return False
        record = scenario.record()
        if record.get("activeVersions") != [version] or record.get("transitionStatus") != "UpToDate":
            return False
        try:
            return all(
                {v for v, (s, _) in _states(p.url, scenario.model).items() if s in HOLDING} == {version}
                for p in pods
            )
        except OSError:
            return False

    eventually(lambda: settled(1), CONVERGE, "v1 alone on both pods")
    # the premise, from the pods: one copy fits the limit, two do not (or do, for the control)
    measured = [_states(p.url, scenario.model)[1][1] for p in cluster.pods[scenario.name]]
    limit_bytes = limit_mib << 20
    assert all(BALLAST <= m <= limit_bytes for m in measured), (measured, limit_bytes)
    assert all((2 * m > limit_bytes) == (strategy == "perPod") for m in measured), (measured, limit_bytes)
    events_before = _per_pod_events(scenario)

    with Watcher(cluster, scenario) as watcher, Load(cluster.api, scenario.selector, scenario.model) as load:
        _patch_models(scenario, [{**pinned, "versionPolicy": {"specific": {"versions": [2]}}}])
        eventually(lambda: settled(2), CONVERGE, "v2 alone on both pods")
        after = time.monotonic()
        pods = {p.name for p in cluster.pods[scenario.name]}
        load.wait_for(
            lambda answers: {a.pod for a in answers if a.ok and a.done > after and a.version == 2} == pods,
            CONVERGE,
            "v2 answering from every pod",
        )
    assert load.failures() == [], load.failures()[:5]
    assert {a.version for a in load.answers if a.done > after} == {2}  # every pod answers with v2
    assert load.versions() == {1, 2}
    seen = {v for _, states in watcher.samples for v, s in states.items() if s in HOLDING}
    assert seen == {1, 2}, "the watcher did not see the rollout"
    per_pod = [m for n, m in _per_pod_events(scenario).items() if n not in events_before]
    if strategy == "perPod":
        assert watcher.held_both(1, 2) == [], watcher.held_both(1, 2)[:5]
        assert len(per_pod) == 2 and all(any(p in e for e in per_pod) for p in pods), per_pod
    else:
        # v2 loads beside v1 (its load takes 0.5 s: seen LOADING, then READY, while v1 is READY)
        assert watcher.held_both(1, 2), "no pod was seen holding both versions"
        assert per_pod == []
    assert scenario.record()["strategy"] == strategy
    assert set(watcher.strategies) == {strategy}, watcher.strategies
    scenario.delete()
