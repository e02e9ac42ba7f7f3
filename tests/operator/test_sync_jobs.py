"""Sync Jobs on the simulated cluster, end to end: a listing longer than any termination message, pinned
snapshots that GC keeps, a running sync stopped by a spec change or ``suspend``, and a sync that finished
while the operator was down; and the frontend workers a server pod gets from its CPU.

The operator runs as its own process (``python -m naiad_operator``, as in the chaos tests) because one
scenario stops it. Every check reads what happened: the ConfigMap the Job wrote (through the HTTPS
front that authorizes it by the namespace's RBAC), the repository's status, the snapshots on the claim,
the Job processes the kubelet ran or killed, and what each server pod serves.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from naiad_operator.api.modelrepository import ModelRepositorySpec, ModelRepositoryStatus
from naiad_operator.reconcile import listing, repository_status, syncjob

from tests.operator.chaos import OperatorProcess, Scenario
from tests.operator.cluster import NS, FakeCluster
from tests.operator.harness import BUCKET, GROUP_PATH, events, eventually, infer_version, ready_versions
from tests.support.kmock_k8s import ApiServer

#: Models in the large repository: past the ~80 a termination message holds (``make test``); set
#: ``NAIAD_LISTING_MODELS=5000`` for the full size (about a minute more: 5,000 objects to upload and sync).
FILLERS = int(os.environ.get("NAIAD_LISTING_MODELS", "300")) - 1
CONVERGE = 90.0
RBAC = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}"
ACCOUNT = f"system:serviceaccount:{NS}"


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
    cluster.hold_jobs.set()
    try:
        big.create(replicas=1, sync={"keepSnapshots": 1})
        eventually(lambda: big.repository().get("activeJob"), CONVERGE, "the first Job")
        # its right to write the listing is taken away before it runs: only the 4 KiB message is left
        api.request("DELETE", f"{RBAC}/rolebindings/big-listing-writer")
    finally:
        cluster.hold_jobs.clear()
    cut = eventually(lambda: big.repository().get("phase") == "Ready" and big.repository(), CONVERGE, "Ready")
    assert cut["modelsComplete"] is False and cut["modelCount"] == FILLERS + 1
    assert 0 < len(cut["models"]) < 100 and not any(m["name"] == "zz-model" for m in cut["models"])
    assert "not known yet" in cut["lastSync"]["message"]
    assert cluster.front is not None
    refused = ("PATCH", f"/api/v1/namespaces/{NS}/configmaps/big-listing", f"{ACCOUNT}:big-sync", False)
    assert refused in cluster.front.requests
    # the model the cut left out exists: never InvalidSpec, its pod (which loads it at start) serves it
    eventually(lambda: _serving(cluster, "big"), CONVERGE, "the pod loaded zz-model at start")
    record = eventually(lambda: big.record().get("transitionStatus") and big.record(), CONVERGE, "status")
    assert record["transitionStatus"] == "InProgress" and "lastFailure" not in record, record

    # -- the next sync: the operator restored the binding, the Job wrote every model to its ConfigMap --
    big.trigger("full")
    repo = eventually(
        lambda: (r := big.repository()).get("phase") == "Ready" and r.get("modelsComplete") and r,
        CONVERGE,
        "a complete listing",
    )
    assert repo["modelCount"] == FILLERS + 1 and len(repo["models"]) == FILLERS + 1
    assert not (repo["lastSync"].get("message") or "")
    assert any(m["name"] == "zz-model" for m in repo["models"])
    writes = [
        r for r in cluster.front.requests if r[0] == "PATCH" and r[1].endswith("/configmaps/big-listing")
    ]
    assert writes and writes[-1][2:] == (f"{ACCOUNT}:big-sync", True), writes
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
    folder = f"snapshots/{pinned.removeprefix('sha256:')}"
    (pod,) = eventually(
        lambda: (pods := _serving(cluster, "big")) and all(folder in p.template for p in pods) and pods,
        CONVERGE,
        "only the pinned pod serves",
    )
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
    eventually(
        lambda: any(first in m and "suspended" in m for m in events(api, "SyncCancelled")),
        CONVERGE,
        "a SyncCancelled Event",
    )

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


def test_a_listing_of_5000_models_goes_through_the_configmap_whole(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """The Job's own summary step, run as its container runs it (its ServiceAccount mount, the API over
    HTTPS, RBAC from the objects the operator makes), on ``naiad repo sync --json`` output for 5,000
    models: the ConfigMap holds all of them, the termination message a cut copy, and the status the
    operator derives from the ConfigMap lists every model."""
    api = cluster.api
    spec = ModelRepositorySpec.model_validate({"source": {"uri": "s3://b/p"}})
    owner = {
        "apiVersion": "serving.naiad.dev/v1alpha1",
        "kind": "ModelRepository",
        "name": "huge",
        "uid": "u",
    }
    for obj in listing.desired_objects("huge", NS, owner, spec):
        path = f"/apis/{obj['apiVersion']}" if "/" in obj["apiVersion"] else "/api/v1"
        api.create(f"{path}/namespaces/{NS}/{obj['kind'].lower()}s", obj)
    doc = {
        "result": "Succeeded",
        "snapshot": {"id": "sha256:" + "f" * 64, "previous": None},
        "objects": {"listed": 10_000, "copied": 10_000, "reused": 0},
        "models": [
            {
                "name": f"model{i:05d}",
                "config_hash": f"sha256:{i:064x}",
                "versions": [{"version": v, "content_hash": f"sha256:{i * 7 + v:064x}"} for v in (1, 2)],
            }
            for i in range(5000)
        ],
    }
    (tmp_path / "summary.json").write_text(json.dumps(doc))
    (tmp_path / "sync.err").write_text("")
    assert cluster.front is not None
    account = cluster.front.mount({"serviceAccountName": "huge-sync"}, tmp_path / "account")
    env = {
        **os.environ,
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(cluster.front.port),
        listing.CONFIGMAP_ENV: "huge-listing",
        listing.JOB_ENV: "huge-sync-1",
    }
    done = subprocess.run(
        [sys.executable, "-c", syncjob.COMPACT_SUMMARY, *(str(tmp_path / f) for f in ("summary.json", "sync.err")), str(account)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    message = done.stdout.strip()
    assert len(message.encode()) <= 4096 and not done.stderr
    cut = syncjob.parse_summary(message)
    assert cut is not None and cut.truncated and cut.listing and cut.model_count == 5000

    written = api.get(f"/api/v1/namespaces/{NS}/configmaps/huge-listing")
    size = len(written["binaryData"][listing.LISTING_KEY])
    assert size < listing.LISTING_LIMIT
    assert listing.read(written, "huge-sync-2") is None  # another Job's listing is never taken for this one
    full = listing.best(cut, listing.read(written, "huge-sync-1"))
    assert full is not None and len(full.models) == 5000 and not full.truncated
    status = repository_status.finish_sync(
        ModelRepositoryStatus(active_job="huge-sync-1"),
        spec,
        None,
        full,
        datetime.now(UTC),
        syncjob.Backoff(30, 900),
        0.5,
    )
    assert status.models_complete is True and status.model_count == 5000 and len(status.models) == 5000
    assert status.models[-1].name == "model04999" and sorted(status.models[-1].hashes()) == [1, 2]
    print(f"5,000 models x 2 versions: listing ConfigMap {size} bytes (base64 of gzip)")


def test_server_pods_run_the_frontend_workers_their_cpu_allows(
    s3: Any, cluster: FakeCluster, operator_process: OperatorProcess
) -> None:
    """A pod with 4 CPUs runs 2 frontend workers (the server's ``auto`` rule applied to the pod's CPUs,
    not the node's): read from the pod's own process, which answers through them."""
    api = cluster.api
    cpu = Scenario(api, s3, "cpu")
    cpu.upload(1)
    _create_repository(cpu)
    api.create(
        f"{GROUP_PATH}/inferenceservices",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "cpu", "namespace": NS},
            "spec": {
                "repository": {"name": "cpu"},
                "models": [{"name": "m"}],
                "server": {"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "4"}}},
            },
        },
    )
    (pod,) = eventually(lambda: _serving(cluster, "cpu"), CONVERGE, "the pod serves")
    assert "serving through 2 frontend workers" in pod.log.read_text()
    assert infer_version(pod.url, "m") == "1"
    cpu.delete()


def test_failed_syncs_are_retried_with_backoff_shown_in_status(
    s3: Any, cluster: FakeCluster, operator_process: OperatorProcess
) -> None:
    """An empty prefix fails each sync (not_found); the operator retries on its backoff (2 s doubling to
    4 s in this profile) and says so in status, and a success starts the count over."""
    api = cluster.api
    empty = Scenario(api, s3, "empty")
    _create_repository(empty)
    failing = eventually(
        lambda: (s := empty.repository()).get("syncFailures", 0) >= 2 and s, CONVERGE, "two failures in a row"
    )
    synced = next(c for c in failing["conditions"] if c["type"] == "Synced")
    assert synced["reason"] == "SyncFailed" and "time(s) in a row; next try at" in synced["message"]
    assert failing["phase"] == "Failed" and failing["nextSyncTime"]
    started = [j for j in cluster.jobs_run if j.startswith("empty-sync-")]
    assert len(started) >= 2  # each retry is a new Job
    empty.upload(1)
    repo = eventually(lambda: empty.repository().get("phase") == "Ready" and empty.repository(), CONVERGE)
    assert repo["syncFailures"] == 0 and "nextSyncTime" not in repo
    empty.delete()
