"""Cold start per storage mode: a new server pod to Ready, with a 1 GiB repository, on the simulated
cluster (tests/operator/cluster.py: KMock as the API server, real sync Jobs and real ``naiad serve``
processes as pods) with SeaweedFS as S3.

For each mode (``shared``, ``perPod``, ``nodeCache``) it creates a ModelRepository (timing its sync
Job, which copies the repository into the claim), then an InferenceService with one replica, then
scales it to two, and reports for each pod the time from its creation by the Deployment to Ready (its
model loaded): in ``perPod`` that includes the pod's own copy of the 1 GiB snapshot; in ``shared`` the
pod reads the claim; in ``nodeCache`` (both pods on the one simulated node) the first pod copies the
snapshot into the node's copy and the second finds it there (the bytes each pod's init step copied are
reported). The repository is one Python model whose version folder holds a 1 GiB weights file the
model does not read (the cost under test is moving bytes, not loading them).

Usage: ``python benchmarks/operator/cold_start.py [--size-mib 1024] [--modes shared,perPod,nodeCache]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import kopf.testing  # noqa: E402

from tests.operator.cluster import NS, Api, FakeCluster  # noqa: E402
from tests.support.kmock_k8s import ApiServer  # noqa: E402
from tests.support.models import IDENTITY_PY, identity_config  # noqa: E402
from tests.support.object_store import SeaweedS3  # noqa: E402
from tests.support.server import free_port  # noqa: E402

GROUP = f"/apis/serving.naiad.dev/v1alpha1/namespaces/{NS}"
BUCKET = "models"


def wait(check: Any, timeout: float = 1800.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(what)


def upload(store: SeaweedS3, size_mib: int) -> None:
    client = store.client()
    client.create_bucket(Bucket=BUCKET)
    client.put_object(
        Bucket=BUCKET, Key="triton/big/config.pbtxt", Body=identity_config("big", "TYPE_FP32").encode()
    )
    client.put_object(Bucket=BUCKET, Key="triton/big/1/model.py", Body=IDENTITY_PY.encode())
    with tempfile.TemporaryFile() as blob:
        chunk = os.urandom(1 << 20)
        for _ in range(size_mib):
            blob.write(chunk)
        blob.seek(0)
        client.upload_fileobj(blob, BUCKET, "triton/big/1/weights.bin")


def status(api: Api, plural: str, name: str) -> dict[str, Any]:
    return (api.get(f"{GROUP}/{plural}/{name}") or {}).get("status") or {}


def run_mode(api: Api, cluster: FakeCluster, store: SeaweedS3, mode: str) -> dict[str, Any]:
    repo, isvc = f"repo-{mode.lower()}", f"svc-{mode.lower()}"
    storage: dict[str, Any] = {"mode": mode, "size": "4Gi"}
    if mode == "shared":
        storage["accessModes"] = ["ReadWriteMany"]
    source = {
        "uri": f"s3://{BUCKET}/triton",
        "endpoint": store.endpoint,
        "credentials": {"secretRef": {"name": "s3"}},
    }
    started = time.monotonic()
    api.create(
        f"{GROUP}/modelrepositories",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "ModelRepository",
            "metadata": {"name": repo},
            "spec": {"source": source, "storage": storage},
        },
    )
    wait(lambda: status(api, "modelrepositories", repo).get("phase") == "Ready", what="repository Ready")
    sync = status(api, "modelrepositories", repo)["lastSync"]
    repository_ready = time.monotonic() - started
    api.create(
        f"{GROUP}/inferenceservices",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": isvc},
            "spec": {"repository": {"name": repo}, "models": [{"name": "big"}], "replicas": 1},
        },
    )
    wait(lambda: [p for p in cluster.pods.get(isvc, []) if p.ready_at], what="first pod Ready")
    api.patch(f"{GROUP}/inferenceservices/{isvc}", {"spec": {"replicas": 2}})
    pods = wait(
        lambda: (ps := cluster.pods.get(isvc, [])) and len(ps) == 2 and all(p.ready_at for p in ps) and ps,
        what="second pod Ready",
    )
    starts = [round(p.ready_at - p.started, 2) for p in pods]  # type: ignore[operator]
    pulled = [(cluster.init_messages.get(p.name) or [""])[-1] for p in pods]
    api.request("DELETE", f"{GROUP}/inferenceservices/{isvc}")
    return {
        "mode": mode,
        "sync_job_seconds": sync.get("durationSeconds"),
        "bytes_synced": sync.get("bytesCopied"),
        "repository_ready_seconds": round(repository_ready, 2),
        "pod_cold_start_seconds": starts,
        "pod_cold_start_median": statistics.median(starts),
        "pod_init_messages": pulled,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--modes", default="shared,perPod,nodeCache")
    args = parser.parse_args()
    store = SeaweedS3().start()
    server = ApiServer(sorted((ROOT / "crds").glob("*.yaml"))).start()
    cluster = FakeCluster(Api(server.url), {"AWS_EC2_METADATA_DISABLED": "true"}).start()
    workdir = Path(tempfile.mkdtemp(prefix="naiad-cold-"))
    os.environ.update(
        KUBECONFIG=str(server.kubeconfig(workdir / "kubeconfig")),
        NAIAD_OPERATOR_RECONCILE_INTERVAL="2",
        NAIAD_OPERATOR_SYNC_POLL_INTERVAL="0.5",
        NAIAD_OPERATOR_METRICS_PORT=str(free_port()),
    )
    results = []
    try:
        t0 = time.monotonic()
        upload(store, args.size_mib)
        print(f"uploaded {args.size_mib} MiB in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        cluster.api.create(
            f"/api/v1/namespaces/{NS}/secrets",
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3"}, "stringData": store.env()},
        )
        argv = ["run", "--standalone", "--namespace", NS, "-m", "naiad_operator.handlers"]
        with kopf.testing.KopfRunner(argv, timeout=60):
            for mode in args.modes.split(","):
                results.append(run_mode(cluster.api, cluster, store, mode))
                print(json.dumps(results[-1]), file=sys.stderr)
    finally:
        cluster.stop()
        server.stop()
        store.stop()
        shutil.rmtree(cluster.pod_dir("-").parent.parent, ignore_errors=True)  # the claims and pod copies
    print(json.dumps({"size_mib": args.size_mib, "results": results, "load": os.getloadavg()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
