"""The operator end to end, without a cluster: kopf under ``KopfRunner`` against KMock (with our shim) as
the Kubernetes API, a real S3 server (SeaweedFS) behind the sync Jobs, and real ``naiad serve``
processes as the server pods (see ``cluster.py``; fixtures in ``conftest.py``).

One scenario, step by step, as a user lives it: create a repository and a service, add a model, roll a
new version, remove a model, break a model, unload one by hand, delete the repository. At each step the
test checks what reached the servers (their repository index, their log, and inference answers sampled
throughout) and that status tells the truth. The repository uses ``storage.mode: shared`` (in-place
rollouts on one claim); ``test_storage_modes.py`` covers ``perPod``.
"""

from __future__ import annotations

import os
import re
import time
import urllib.request
from collections import Counter
from typing import Any

from tests.operator.cluster import NS, FakeCluster
from tests.operator.harness import (
    BROKEN_PY,
    GROUP_PATH,
    Prober,
    conditions,
    create_s3_repository,
    events,
    eventually,
    index,
    infer_version,
    model_status,
    post,
    ready_repository,
    ready_versions,
    status_of,
    trigger_sync,
    upload,
)
from tests.support.kmock_k8s import ApiServer


def metrics() -> dict[str, float]:
    """The operator's /metrics, sample name with labels -> value."""
    port = os.environ["NAIAD_OPERATOR_METRICS_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_operator_lifecycle(s3: Any, api_server: ApiServer, cluster: FakeCluster, operator: Any) -> None:
    api = cluster.api
    upload(s3, "alpha", 1)
    upload(s3, "beta", 1)
    create_s3_repository(api, s3, {"mode": "shared", "accessModes": ["ReadWriteMany"]})
    api.create(
        f"{GROUP_PATH}/inferenceservices",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "vision", "namespace": NS},
            "spec": {"repository": {"name": "models"}, "models": [{"name": "alpha"}]},
        },
    )

    # -- create: the sync Job fills the claim, the pod starts with alpha, status says Ready -------------
    repo = eventually(lambda: ready_repository(api), what="repository Ready")
    assert repo["lastSync"]["result"] == "Succeeded" and repo["lastSync"]["objectsCopied"] == 4
    assert [m["name"] for m in repo["models"]] == ["alpha", "beta"]
    assert conditions(api, "modelrepositories", "models") == {
        "SourceReachable": "True",
        "Synced": "True",
        "Ready": "True",
    }
    eventually(
        lambda: conditions(api, "inferenceservices", "vision").get("Ready") == "True", what="service Ready"
    )
    pod = cluster.pods["vision"][0]
    url, pid = pod.url, pod.process.pid
    assert index(url) == {"alpha": {"1": "READY"}, "beta": {}}
    alpha = model_status(api, "alpha")
    assert alpha["transitionStatus"] == "UpToDate" and alpha["activeVersions"] == [1]
    assert alpha["copies"] == {"desired": 1, "ready": 1, "loading": 0, "failed": 0}
    assert status_of(api, "inferenceservices", "vision")["url"] == "http://vision.default.svc:8000"

    # -- add a model: loaded in place, the pod is not restarted ------------------------------------------
    api.patch(
        f"{GROUP_PATH}/inferenceservices/vision", {"spec": {"models": [{"name": "alpha"}, {"name": "beta"}]}}
    )
    eventually(
        lambda: model_status(api, "beta").get("transitionStatus") == "UpToDate", what="beta rolled out"
    )
    assert ready_versions(url, "beta") == (1,)
    assert cluster.pods["vision"][0].process.pid == pid
    # a state, not a snapshot: a readiness probe the loaded machine's pod misses counts it out for a pass
    eventually(
        lambda: status_of(api, "inferenceservices", "vision")["modelsReady"] == "2/2", what="2/2 ready"
    )
    assert any("beta versions [1]" in m for m in events(api, "ModelLoaded"))
    configmap = api.get(f"/api/v1/namespaces/{NS}/configmaps/vision-models")
    assert (
        configmap["data"]["load-model-args"] == "--load-model=alpha --load-model=beta"
    )  # for pods started later

    # -- change a version: make before break, the default switches only when v2 is everywhere ---------
    upload(s3, "alpha", 2)
    with Prober(url, "alpha") as probe:
        trigger_sync(api, "v2")
        eventually(lambda: model_status(api, "alpha").get("activeVersions") == [2], what="alpha v2 active")
        time.sleep(0.3)
    assert not probe.errors, probe.errors[:3]
    assert probe.served == sorted(probe.served) and probe.served[0] == "1" and probe.served[-1] == "2"
    # the index never went without a READY version; it moved 1 -> (1, 2) -> 2 (the middle may be too
    # brief to sample; the server's log below shows it)
    stages = [s for i, s in enumerate(probe.indexes) if i == 0 or probe.indexes[i - 1] != s]
    assert stages[0] == (1,) and stages[-1] == (2,) and all(s in [(1,), (1, 2), (2,)] for s in stages), stages
    assert [s for s in [(1,), (1, 2), (2,)] if s in stages] == stages, stages
    loaded = re.findall(r"successfully loaded 'alpha' version\(s\) ([0-9, ]*[0-9])", pod.log.read_text())
    # load {1, 2} (default 1), pin 2 (nothing reloads: a no-op load), keep only 2
    assert loaded[-3:] == ["1, 2", "1, 2", "2"] or loaded[-2:] == ["1, 2", "2"], loaded
    alpha = model_status(api, "alpha")
    assert alpha["defaultVersion"] == 2 and set(alpha["contentHashes"]) == {"2"}
    assert model_status(api, "beta").get("contentHashes") == {
        "1": status_of(api, "modelrepositories", "models")["models"][1]["versions"][0]["contentHash"]
    }  # beta untouched, its hash unchanged
    assert cluster.pods["vision"][0].process.pid == pid

    # -- remove a model: unloaded from the pod, gone from status ------------------------------------------
    api.patch(f"{GROUP_PATH}/inferenceservices/vision", {"spec": {"models": [{"name": "alpha"}]}})
    eventually(lambda: ready_versions(url, "beta") == (), what="beta unloaded")
    eventually(
        lambda: [m["name"] for m in status_of(api, "inferenceservices", "vision")["models"]] == ["alpha"]
    )
    assert any("beta unloaded" in m for m in events(api, "ModelUnloaded"))

    # -- break a model: v3 fails to load, v2 keeps serving, status says BlockedByFailedLoad -------------
    upload(s3, "alpha", 3, BROKEN_PY)
    trigger_sync(api, "v3")
    blocked = eventually(
        lambda: (
            model_status(api, "alpha").get("transitionStatus") == "BlockedByFailedLoad"
            and model_status(api, "alpha")
        ),
        what="alpha blocked",
    )
    assert (
        "weights are corrupt" in blocked["lastFailure"]["message"] and blocked["lastFailure"]["version"] == 3
    )
    assert blocked["activeVersions"] == [2] and ready_versions(url, "alpha") == (2,)
    assert infer_version(url, "alpha") == "2"
    svc = conditions(api, "inferenceservices", "vision")
    assert svc["Servable"] == "True" and svc["Ready"] == "False" and svc["ModelsReady"] == "False"
    assert status_of(api, "inferenceservices", "vision")["phase"] == "Degraded"
    assert any("weights are corrupt" in m for m in events(api, "BlockedByFailedLoad"))
    # the operator's own metrics say it too
    scraped = metrics()
    assert scraped['naiad_operator_blocked_models{inferenceservice="vision",namespace="default"}'] == 1
    assert scraped['naiad_operator_model_load_failures_total{namespace="default"}'] >= 1
    assert scraped['naiad_operator_syncs_total{result="Succeeded"}'] >= 3
    assert scraped['naiad_operator_rollout_stage_duration_seconds_count{stage="Load"}'] >= 3
    assert scraped['naiad_operator_reconcile_duration_seconds_count{kind="InferenceService"}'] >= 5
    assert scraped.get('naiad_operator_reconcile_errors_total{kind="InferenceService"}', 0) == 0
    time.sleep(2.5)  # two more timer passes: the failed target is not retried
    assert sum("alpha versions [2, 3]" in m for m in events(api, "ModelLoaded")) <= 1

    # -- drift: a model unloaded by hand comes back on the next pass -------------------------------------
    loaded_before = len(events(api, "ModelLoaded"))
    post(f"{url}/v2/repository/models/alpha/unload", {})
    eventually(lambda: ready_versions(url, "alpha") == (2,), what="alpha reloaded after a manual unload")
    # no watch sees a manual unload: the periodic pass repaired it, and its Event was posted too
    eventually(lambda: len(events(api, "ModelLoaded")) > loaded_before, what="the repair's Event")
    assert metrics().get('naiad_operator_reconcile_errors_total{kind="InferenceService"}', 0) == 0

    # -- steady state: once settled, timer passes keep reading pods and write nothing at all ------------
    def settled() -> bool:
        before = api.get(f"{GROUP_PATH}/inferenceservices/vision")["metadata"]["resourceVersion"]
        time.sleep(1.5)
        return api.get(f"{GROUP_PATH}/inferenceservices/vision")["metadata"]["resourceVersion"] == before

    eventually(settled, what="status settled after the repair")
    assert api_server.emulator is not None
    calls = Counter(api_server.emulator.calls)
    time.sleep(3)  # three timer passes
    window = Counter(api_server.emulator.calls) - calls
    assert {path for (method, path), n in window.items() if method != "GET"} == set()
    assert window[("GET", f"{GROUP_PATH}/inferenceservices/vision")] >= 2  # the passes did run
    # ... and read pods and children from the watches: no pod list, no Deployment read per pass
    assert window[("GET", f"/api/v1/namespaces/{NS}/pods")] == 0
    assert window[("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/vision")] == 0

    # -- no finalizers: deleting never waits for the operator (an uninstalled one cannot wedge it) --------
    for plural, name in (("inferenceservices", "vision"), ("modelrepositories", "models")):
        assert not api.get(f"{GROUP_PATH}/{plural}/{name}")["metadata"].get("finalizers"), plural

    # -- delete the repository: retentionPolicy Retain leaves the claim unowned, so it stays -------------
    api.request("DELETE", f"{GROUP_PATH}/modelrepositories/models")
    eventually(lambda: api.get(f"{GROUP_PATH}/modelrepositories/models") is None, what="repository deleted")
    claim = api.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/models-repository")
    assert claim is not None and not claim["metadata"].get("ownerReferences")
