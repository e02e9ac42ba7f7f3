"""Sync Jobs on the simulated cluster, end to end: a listing longer than any termination message, pinned
snapshots that GC keeps, a running sync stopped by a spec change or ``suspend``, and a sync that finished
while the operator was down.

The operator runs as its own process (``python -m naiad_operator``, as in the chaos tests) because one
scenario stops it. Every check reads what happened: the ConfigMap the Job wrote (through the HTTPS
front that authorizes it by the namespace's RBAC), the repository's status, the snapshots on the claim,
the Job processes the kubelet ran or killed, and what each server pod serves.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.operator.chaos import OperatorProcess, Scenario
from tests.operator.cluster import NS, FakeCluster
from tests.operator.harness import BUCKET, GROUP_PATH, events, eventually, infer_version, ready_versions
from tests.support.kmock_k8s import ApiServer

#: Models in the large repository: past the ~80 a termination message holds (``make test``); set
#: ``NAIAD_LISTING_MODELS=5000`` for the full size (about a minute more: 5,000 objects to upload and sync).
FILLERS = int(os.environ.get("NAIAD_LISTING_MODELS", "300")) - 1
CONVERGE = 90.0


@pytest.fixture(scope="module")
def operator_process(
    api_server: ApiServer, cluster: FakeCluster, s3: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    cluster.api.create(
        f"/api/v1/namespaces/{NS}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-creds"}, "stringData": s3.env()},
    )
    kubeconfig = api_server.kubeconfig(tmp_path_factory.mktemp("kube") / "config")
    process = OperatorProcess(kubeconfig, tmp_path_factory.mktemp("operator"), "solo").start()
    yield process
    process.stop()


def _repository(api: Any, name: str) -> dict[str, Any]:
    return (api.get(f"{GROUP_PATH}/modelrepositories/{name}") or {}).get("status") or {}


def _serving(cluster: FakeCluster, name: str) -> list[Any]:
    return [p for p in cluster.pods.get(name, []) if p.ready]


def _create_repository(scenario: Scenario, endpoint: str | None = None) -> None:
    """The scenario's ModelRepository alone: these checks are about the sync, no server needs to run."""
    scenario.api.create(
        f"{GROUP_PATH}/modelrepositories",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "ModelRepository",
            "metadata": {"name": scenario.name, "namespace": NS},
            "spec": {
                "source": {
                    "uri": f"s3://{BUCKET}/{scenario.prefix}",
                    "endpoint": endpoint or scenario.s3.endpoint,
                    "credentials": {"secretRef": {"name": "s3-creds"}},
                },
                "storage": {"mode": "shared", "accessModes": ["ReadWriteMany"]},
            },
        },
    )


def _upload_fillers(s3: Any, prefix: str, count: int) -> None:
    """``count`` one-file models (no config: nothing loads them), named so that all sort before ours."""
    client = s3.client()

    def put(i: int) -> None:
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/filler{i:05d}/1/model.onnx", Body=b"-")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(count)))


def test_a_large_listing_reaches_every_service_and_pinned_snapshots_survive_gc(
    s3: Any, cluster: FakeCluster, operator_process: OperatorProcess
) -> None:
    api = cluster.api
    big = Scenario(api, s3, "big", model="zz-model")  # the last name: the first a cut listing dropped
    _upload_fillers(s3, big.prefix, FILLERS)
    big.upload(1)
    big.create(replicas=1, sync={"keepSnapshots": 1})

    # -- the Job wrote every model to its ConfigMap, with its own account, as its Role allows ----------
    repo = eventually(
        lambda: big.repository().get("phase") == "Ready" and big.repository(), CONVERGE, "Ready"
    )
    assert repo["modelCount"] == FILLERS + 1 and len(repo["models"]) == FILLERS + 1
    assert repo["modelsComplete"] is True and not (repo["lastSync"].get("message") or "")
    assert any(m["name"] == "zz-model" for m in repo["models"])
    assert cluster.front is not None
    writes = [
        r for r in cluster.front.requests if r[0] == "PATCH" and r[1].endswith("/configmaps/big-listing")
    ]
    assert writes and writes[-1][2:] == ("system:serviceaccount:default:big-sync", True), writes
    job = api.get(f"/apis/batch/v1/namespaces/{NS}/jobs/{repo['lastSync']['jobName']}")
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "big-sync"
    listing = api.get(f"/api/v1/namespaces/{NS}/configmaps/big-listing")
    assert listing["metadata"]["ownerReferences"][0]["kind"] == "ModelRepository"  # outlives the Job

    # -- the model past the old cut is served, not InvalidSpec ------------------------------------------
    eventually(lambda: big.record().get("transitionStatus") == "UpToDate", CONVERGE, "zz-model UpToDate")
    (pod,) = _serving(cluster, "big")
    assert infer_version(pod.url, "zz-model") == "1"

    # -- pin the service to this snapshot; two more syncs with keepSnapshots 1 ---------------------------
    pinned = repo["snapshot"]["current"]
    api.patch(f"{GROUP_PATH}/inferenceservices/big", {"spec": {"repository": {"snapshot": pinned}}})
    claim = cluster.claim_dir(repo["claimName"])
    current = pinned
    for version in (2, 3):
        big.upload(version)
        big.trigger(f"v{version}")
        current = eventually(
            lambda old=current: (s := big.repository()["snapshot"]["current"]) != old and s,
            CONVERGE,
            "synced",
        )
    last = api.get(f"/apis/batch/v1/namespaces/{NS}/jobs/{big.repository()['lastSync']['jobName']}")
    args = last["spec"]["template"]["spec"]["containers"][0]["command"]
    assert args[args.index("--protect") + 1] == pinned
    # GC kept the pinned snapshot and the current one, and dropped the one in between
    assert sorted(p.name for p in (claim / "snapshots").iterdir()) == sorted(
        s.removeprefix("sha256:") for s in (pinned, current)
    )
    # the pinned service's pod reads that snapshot's folder, which is still there
    (pod,) = eventually(lambda: _serving(cluster, "big"), CONVERGE, "the pinned pod serves")
    assert ready_versions(pod.url, "zz-model") == (1,) and infer_version(pod.url, "zz-model") == "1"
    assert big.record().get("transitionStatus") == "UpToDate"
    big.delete()


def test_a_spec_change_or_suspend_stops_a_running_sync(
    s3: Any, cluster: FakeCluster, operator_process: OperatorProcess
) -> None:
    api = cluster.api
    hole = socket.create_server(("127.0.0.1", 0))  # accepts connections into its backlog, never answers
    stuck = Scenario(api, s3, "stuck")
    stuck.upload(1)
    _create_repository(stuck, endpoint=f"http://127.0.0.1:{hole.getsockname()[1]}")

    def running() -> str | None:
        job = stuck.repository().get("activeJob")
        process = cluster.job_processes.get(job or "")
        return job if process is not None and process.poll() is None else None

    first = eventually(running, CONVERGE, "a sync Job hanging on the source")
    api.patch(f"{GROUP_PATH}/modelrepositories/stuck", {"spec": {"suspend": True}})
    eventually(
        lambda: cluster.jobs_done.get(first) is not None, CONVERGE, "the suspended Job's process ended"
    )
    assert cluster.jobs_done[first] != 0  # killed, not finished
    assert api.get(f"/apis/batch/v1/namespaces/{NS}/jobs/{first}") is None
    status = eventually(
        lambda: (s := stuck.repository()).get("observedGeneration") == 2 and s, CONVERGE, "status of gen 2"
    )
    assert status.get("activeJob") is None and "suspended" in status["lastSync"]["message"]
    assert any(first in m and "suspended" in m for m in events(api, "SyncCancelled"))

    api.patch(f"{GROUP_PATH}/modelrepositories/stuck", {"spec": {"suspend": False}})
    second = eventually(lambda: (j := running()) != first and j, CONVERGE, "a new Job, hanging again")
    api.patch(f"{GROUP_PATH}/modelrepositories/stuck", {"spec": {"source": {"endpoint": s3.endpoint}}})
    eventually(
        lambda: cluster.jobs_done.get(second) is not None, CONVERGE, "the outdated Job's process ended"
    )
    assert cluster.jobs_done[second] != 0
    repo = eventually(lambda: stuck.repository().get("phase") == "Ready" and stuck.repository(), CONVERGE)
    assert repo["lastSync"]["jobName"] not in (first, second) and repo["lastSync"]["result"] == "Succeeded"
    assert (cluster.claim_dir(repo["claimName"]) / "current" / "m" / "1" / "model.py").exists()
    hole.close()
    stuck.delete()


def test_a_sync_that_finished_while_the_operator_was_down_is_read_from_its_listing(
    s3: Any, cluster: FakeCluster, operator_process: OperatorProcess
) -> None:
    api = cluster.api
    late = Scenario(api, s3, "late")
    late.upload(1)
    _create_repository(late)
    first = eventually(lambda: late.repository().get("phase") == "Ready" and late.repository(), CONVERGE)
    claim = cluster.claim_dir(first["claimName"])

    cluster.hold_jobs.set()  # the next Job waits for room
    try:
        late.upload(2)
        late.trigger("v2")
        job = eventually(
            lambda: (j := late.repository().get("activeJob")) != first["lastSync"]["jobName"] and j,
            CONVERGE,
            "the operator started a Job",
        )
        operator_process.kill()
    finally:
        cluster.hold_jobs.clear()
    eventually(lambda: cluster.jobs_done.get(job) == 0, CONVERGE, "the Job ran to its end")
    # ttlSecondsAfterFinished runs out before the operator is back: the Job and its pod are gone
    api.request("DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/{job}")
    api.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{job}-pod")
    moved = Path(os.readlink(claim / "current")).name
    assert f"sha256:{moved}" != first["snapshot"]["current"]

    operator_process.start()
    status = eventually(
        lambda: (
            (s := late.repository()).get("activeJob") is None
            and s.get("lastSync", {}).get("jobName") == job
            and s
        ),
        CONVERGE,
        "the restarted operator read the Job's outcome",
    )
    assert status["lastSync"]["result"] == "Succeeded" and status["phase"] == "Ready"
    assert status["snapshot"]["current"] == f"sha256:{moved}"  # what the claim says
    assert not [m for m in events(api, "SyncFailed") if job in m]
    assert [(m["name"], [v["version"] for v in m["versions"]]) for m in status["models"]] == [("m", [1, 2])]
    assert (claim / "current" / "m" / "2" / "model.py").exists()
    late.delete()
