"""What every pod serves is what the spec says (issue 23): the ``configOverride`` and the pinned versions
reach pods that start, scale up or restart; a changed override rolls out with no failed request; a
failed model is retried once its cause is fixed; a model failing at a pod's start leaves the pod up to
report it; a ``perPod`` rollout keeps one pod out at a time.

On the simulated cluster (KMock, real sync Jobs against SeaweedFS, real ``naiad serve`` pods), checked
against each pod's own ``/config`` and repository index and against the answers of HTTP and gRPC clients
sending to the Service's ready endpoints throughout (:class:`~tests.operator.load.Load`).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.operator.chaos import Scenario
from tests.operator.cluster import NS, FakeCluster
from tests.operator.harness import GROUP_PATH, eventually, index
from tests.operator.load import Load, ready_endpoints
from tests.support.kmock_k8s import ApiServer

CONVERGE = 120.0  # generous: the machine is shared; every wait returns as soon as the state is reached
PARAM = "flavour"


def _create(scenario: Scenario, models: list[dict[str, Any]], replicas: int = 2, **spec: Any) -> None:
    """The scenario's repository and an InferenceService serving ``models`` (each a ``models[]`` entry),
    with more of the service's ``spec`` as given."""
    scenario.api.create(
        f"{GROUP_PATH}/modelrepositories",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "ModelRepository",
            "metadata": {"name": scenario.name, "namespace": NS},
            "spec": {
                "source": {
                    "uri": f"s3://models/{scenario.prefix}",
                    "endpoint": scenario.s3.endpoint,
                    "credentials": {"secretRef": {"name": "s3-creds"}},
                },
                "storage": {"mode": "shared", "accessModes": ["ReadWriteMany"]},
            },
        },
    )
    scenario.api.create(
        f"{GROUP_PATH}/inferenceservices",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": scenario.name, "namespace": NS},
            "spec": {"repository": {"name": scenario.name}, "models": models, "replicas": replicas, **spec},
        },
    )


def _patch_models(scenario: Scenario, models: list[dict[str, Any]], **spec: Any) -> None:
    scenario.api.patch(
        f"{GROUP_PATH}/inferenceservices/{scenario.name}", {"spec": {"models": models, **spec}}
    )


def _config(url: str, model: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/v2/models/{model}/config", timeout=10) as r:
        return dict(json.loads(r.read()))


def _flavour(url: str, model: str) -> str | None:
    parameters = _config(url, model).get("parameters") or {}
    return (parameters.get(PARAM) or {}).get("string_value")


def _ready(url: str, model: str) -> set[int]:
    return {int(v) for v, s in index(url).get(model, {}).items() if s == "READY"}


def _every_pod(
    cluster: FakeCluster, scenario: Scenario, replicas: int, flavour: str, versions: set[int]
) -> bool:
    """Every pod of the service is up, in the endpoints, and serves ``versions`` with the override."""
    pods = cluster.pods.get(scenario.name, [])
    if len(pods) != replicas or not all(p.ready for p in pods):
        return False
    if len(ready_endpoints(scenario.api, scenario.selector)) != replicas:
        return False
    try:
        return all(
            _ready(p.url, scenario.model) == versions and _flavour(p.url, scenario.model) == flavour
            for p in pods
        )
    except OSError:
        return False


def _setup(cluster: FakeCluster, s3: Any) -> None:
    if cluster.api.get(f"/api/v1/namespaces/{NS}/secrets/s3-creds") is None:
        cluster.api.create(
            f"/api/v1/namespaces/{NS}/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "s3-creds", "namespace": NS},
                "stringData": s3.env(),
            },
        )


def test_override_and_pin_reach_every_pod_started_scaled_or_restarted(
    s3: Any, api_server: ApiServer, cluster: FakeCluster, operator: Any
) -> None:
    """The repository holds v1 and v2; the spec pins v1 with an override. Pods start by loading
    ``config.pbtxt``'s newest version (v2) without the override: none of that may ever answer."""
    _setup(cluster, s3)
    scenario = Scenario(cluster.api, s3, "override")
    scenario.upload(1)
    scenario.upload(2)
    model = {
        "name": scenario.model,
        "versionPolicy": {"specific": {"versions": [1]}},
        "configOverride": {"parameters": {PARAM: {"string_value": "a"}}},
    }
    _create(scenario, [model])
    eventually(lambda: _every_pod(cluster, scenario, 2, "a", {1}), CONVERGE, "v1 with flavour a on both pods")
    with Load(cluster.api, scenario.selector, scenario.model) as load:
        # scale up: the new pod joins the endpoints only once it serves v1 with the override
        _patch_models(scenario, [model], replicas=3)
        eventually(lambda: _every_pod(cluster, scenario, 3, "a", {1}), CONVERGE, "the third pod too")
        # a server that dies comes back with v2 loaded plain: held out until it serves v1 with flavour a
        victim = cluster.pods[scenario.name][0]
        killed = time.monotonic()
        os.killpg(victim.process.pid, signal.SIGKILL)
        eventually(
            lambda: cluster.pods[scenario.name][0].restarts == victim.restarts + 1, CONVERGE, "restarted"
        )
        eventually(lambda: _every_pod(cluster, scenario, 3, "a", {1}), CONVERGE, "the restarted pod too")
        back = time.monotonic()
        # only the override changes: every pod reloads with it, in place, without a failed request
        changed = time.monotonic()
        model["configOverride"] = {"parameters": {PARAM: {"string_value": "b"}}}
        pids = {p.name: p.process.pid for p in cluster.pods[scenario.name]}
        _patch_models(scenario, [model])
        eventually(lambda: _every_pod(cluster, scenario, 3, "b", {1}), CONVERGE, "flavour b on every pod")
        eventually(lambda: scenario.record().get("transitionStatus") == "UpToDate", CONVERGE, "up to date")
        assert {p.name: p.process.pid for p in cluster.pods[scenario.name]} == pids  # no pod restarted
        settled = time.monotonic()
        time.sleep(1.0)
    assert load.versions() == {1}, "a pod answered with a version the spec does not serve"
    assert [a for a in load.answers if a.ok and a.done > settled], "traffic went on after the change"
    for answer in load.failures():  # only the killed pod, only while it was dead
        assert answer.pod == victim.name and killed - 1 <= answer.sent <= back, answer
    assert [a for a in load.failures() if a.sent >= changed] == []
    record = scenario.record()
    assert record["activeVersions"] == [1] and record["defaultVersion"] == 1 and record.get("configHash")
    scenario.delete()


FLAKY_PY = """
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if not os.path.exists({marker!r}):
            raise MemoryError("out of memory while loading the weights")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""

PICKY_PY = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if "ok" not in (json.loads(args["model_config"]).get("parameters") or {}):
            raise RuntimeError("this model needs the parameter 'ok'")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""


def _upload_py(scenario: Scenario, model: str, source: str) -> None:
    from tests.support.models import identity_config

    client = scenario.s3.client()
    prefix = f"{scenario.prefix}/{model}"
    client.put_object(
        Bucket="models", Key=f"{prefix}/config.pbtxt", Body=identity_config(model, "TYPE_FP32").encode()
    )
    client.put_object(Bucket="models", Key=f"{prefix}/1/model.py", Body=source.encode())


def _model(scenario: Scenario, name: str) -> dict[str, Any]:
    return next((m for m in scenario.service().get("models") or [] if m["name"] == name), {})


def test_blocked_models_are_retried_when_fixed(
    s3: Any, api_server: ApiServer, cluster: FakeCluster, operator: Any, tmp_path: Path
) -> None:
    """``picky`` fails until the override gives it what it needs; ``flaky`` fails with an out-of-memory
    error (transient: a back-off retry is scheduled) until the test frees the memory and bumps the
    retry annotation."""
    _setup(cluster, s3)
    scenario = Scenario(cluster.api, s3, "retry")
    scenario.upload(1)
    marker = tmp_path / "memory-freed"
    _upload_py(scenario, "picky", PICKY_PY)
    _upload_py(scenario, "flaky", FLAKY_PY.format(marker=str(marker)))
    models = [
        {"name": scenario.model},
        {"name": "picky", "required": False},
        {"name": "flaky", "required": False},
    ]
    _create(scenario, models, replicas=1)

    def blocked(name: str) -> dict[str, Any]:
        entry = _model(scenario, name)
        assert entry.get("transitionStatus") == "BlockedByFailedLoad", entry
        return entry

    def up_to_date(name: str) -> dict[str, Any]:
        entry = _model(scenario, name)
        assert entry.get("transitionStatus") == "UpToDate", entry
        return entry

    picky = eventually(lambda: blocked("picky"), CONVERGE, "picky blocked")
    assert "needs the parameter 'ok'" in picky["lastFailure"]["message"]
    assert picky.get("nextRetry") is None  # not transient: waits for a change
    flaky = eventually(lambda: blocked("flaky"), CONVERGE, "flaky blocked")
    assert "out of memory" in flaky["lastFailure"]["message"] and flaky["retries"] == 1
    failed_at = time.strptime(flaky["lastFailure"]["time"], "%Y-%m-%dT%H:%M:%SZ")
    next_at = time.strptime(flaky["nextRetry"], "%Y-%m-%dT%H:%M:%SZ")
    assert 29 <= time.mktime(next_at) - time.mktime(failed_at) <= 31  # the first back-off: 30 s

    # the override fixes picky: a new attempt at once
    models[1]["configOverride"] = {"parameters": {"ok": {"string_value": "1"}}}
    _patch_models(scenario, models)
    eventually(lambda: up_to_date("picky"), CONVERGE, "picky loads")
    pod = cluster.pods[scenario.name][0]
    assert "ok" in _config(pod.url, "picky")["parameters"] and _ready(pod.url, "picky") == {1}
    assert _model(scenario, "flaky").get("transitionStatus") == "BlockedByFailedLoad"  # not retried yet

    # memory freed; the user asks for a retry rather than waiting for the back-off
    marker.write_text("")
    scenario.api.patch(
        f"{GROUP_PATH}/inferenceservices/{scenario.name}",
        {"metadata": {"annotations": {"serving.naiad.dev/retry-models": "1"}}},
    )
    flaky = eventually(lambda: up_to_date("flaky"), CONVERGE, "flaky loads after the retry annotation")
    assert flaky.get("nextRetry") is None and flaky.get("retries", 0) == 0
    assert _ready(pod.url, "flaky") == {1}
    scenario.delete()


def test_per_pod_rollout_keeps_one_pod_out_and_never_two_versions_in_a_pod(
    s3: Any, api_server: ApiServer, cluster: FakeCluster, operator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``perPod`` from the spec (the choice from measured memory: test_rollout_memory.py), on a node whose
    kubelet reports a closed gate as not Ready 2 s late, longer than the drain (1.5 s here): the pod must
    leave the endpoints before its model is unloaded, or clients get 404s."""
    _setup(cluster, s3)
    monkeypatch.setattr(cluster, "kubelet_lag", 2.0)
    scenario = Scenario(cluster.api, s3, "perpod")
    scenario.upload(1)
    _create(scenario, [{"name": scenario.model, "rollout": {"strategy": "perPod"}}], replicas=3)
    eventually(
        lambda: (
            len(ready_endpoints(scenario.api, scenario.selector)) == 3
            and scenario.record().get("activeVersions") == [1]
        ),
        CONVERGE,
        "v1 on three pods",
    )
    held: list[tuple[str, frozenset[str]]] = []
    endpoints: list[int] = []
    stop = threading.Event()

    def watch() -> None:  # what each pod holds (READY or LOADING) and how many pods are in the endpoints
        while not stop.wait(0.05):
            try:
                endpoints.append(len(ready_endpoints(scenario.api, scenario.selector)))
            except OSError:
                continue
            for pod in list(cluster.pods.get(scenario.name, [])):
                try:
                    states = index(pod.url).get(scenario.model, {})
                except OSError:
                    continue
                held.append((pod.name, frozenset(v for v, s in states.items() if s in ("READY", "LOADING"))))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with Load(cluster.api, scenario.selector, scenario.model) as load:
        scenario.upload(2, load_seconds=0.5)
        scenario.trigger("v2")
        eventually(lambda: scenario.record().get("activeVersions") == [2], CONVERGE, "v2 active")
        for pod in cluster.pods[scenario.name]:
            assert _ready(pod.url, scenario.model) == {2}
        eventually(lambda: len(ready_endpoints(scenario.api, scenario.selector)) == 3, CONVERGE, "all back")
    stop.set()
    watcher.join(10)
    assert scenario.record()["strategy"] == "perPod"
    assert load.failures() == [], load.failures()[:5]
    assert load.versions() == {1, 2}
    assert min(endpoints) >= 2, "more than one pod was out of the endpoints at once"
    assert [h for h in held if {"1", "2"} <= h[1]] == [], "a pod held both versions"
    assert {v for _, h in held for v in h} == {"1", "2"}  # the watcher saw both eras
    scenario.delete()


def test_a_model_failing_at_pod_start_leaves_the_pod_up_to_report_it(
    s3: Any, api_server: ApiServer, cluster: FakeCluster, operator: Any
) -> None:
    """A pod loads its required models at start; ``picky`` fails there.  As in Triton, a server whose
    start-up load fails exits, unless ``--exit-on-error=false``, which the operator passes: the pod
    stays up, serves the other model, and its index gives the status the failure's reason."""
    _setup(cluster, s3)
    scenario = Scenario(cluster.api, s3, "startfail")
    scenario.upload(1)
    _upload_py(scenario, "picky", PICKY_PY)
    _create(scenario, [{"name": scenario.model}, {"name": "picky"}], replicas=1)

    def failed() -> dict[str, Any]:
        entry = _model(scenario, "picky")
        assert entry.get("state") == "FailedToLoad", entry
        return entry

    picky = eventually(failed, CONVERGE, "picky failed to load")
    assert "needs the parameter 'ok'" in json.dumps(picky)
    (pod,) = cluster.pods[scenario.name]
    assert pod.restarts == 0
    assert _ready(pod.url, scenario.model) == {1}
    assert "READY" not in index(pod.url).get("picky", {}).values()
    scenario.delete()
