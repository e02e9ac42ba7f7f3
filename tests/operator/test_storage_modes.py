"""``storage.mode: perPod`` (the default) end to end: what every pod actually holds and serves.

The claim is mounted only by the sync Job; each server pod's init step pulls the InferenceService's
snapshot from S3 (SeaweedFS) into the pod's own volume. The checks read each pod's own answers (its
index, the config it serves, an inference), the snapshot its init step reported, and which volumes
the pods had, not what the operator planned.
"""

from __future__ import annotations

from typing import Any

from tests.operator.cluster import NS, FakeCluster, ServerPod
from tests.operator.harness import (
    GROUP_PATH,
    conditions,
    create_s3_repository,
    events,
    eventually,
    index,
    infer_version,
    model_status,
    post,
    ready_repository,
    status_of,
    trigger_sync,
    upload,
)


def _serving(cluster: FakeCluster) -> list[ServerPod]:
    return [p for p in cluster.pods.get("vision", []) if p.ready]


def _pulled(cluster: FakeCluster, pod: ServerPod) -> str:
    return cluster.init_messages.get(pod.name, [""])[-1]


def test_per_pod_storage(s3: Any, cluster: FakeCluster, operator: Any) -> None:
    api = cluster.api
    upload(s3, "alpha", 1)
    create_s3_repository(api, s3)  # storage left to its defaults: perPod on a ReadWriteOnce claim
    api.create(
        f"{GROUP_PATH}/inferenceservices",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "vision", "namespace": NS},
            "spec": {
                "repository": {"name": "models"},
                "models": [{"name": "alpha"}],
                "replicas": 2,
            },
        },
    )

    # -- both pods pulled the repository's snapshot into their own volume and serve it ----------------
    repo = eventually(lambda: ready_repository(api), what="repository Ready")
    first = repo["snapshot"]["current"]
    claim = api.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/models-repository")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    eventually(
        lambda: conditions(api, "inferenceservices", "vision").get("Ready") == "True", what="service Ready"
    )
    pods = _serving(cluster)
    assert len(pods) == 2
    deployment = api.get(f"/apis/apps/v1/namespaces/{NS}/deployments/vision")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert all("persistentVolumeClaim" not in v for v in volumes)  # only the sync Job mounts the claim
    for pod in pods:
        assert _pulled(cluster, pod).startswith(f"Pulled {first}"), cluster.init_messages
        assert index(pod.url) == {"alpha": {"1": "READY"}}
        assert infer_version(pod.url, "alpha") == "1"
        copy = cluster.pod_dir(pod.name) / "repository"
        assert (copy / "current" / "alpha" / "1" / "model.py").exists()
    alpha = model_status(api, "alpha")
    assert alpha["transitionStatus"] == "UpToDate" and alpha["copies"]["ready"] == 2

    # -- a new version: the pods are replaced by pods holding the new snapshot (no in-place load on a
    #    pod whose copy lacks it), old pods serve until new ones are Ready -------------------------------
    old = {p.name for p in pods}
    upload(s3, "alpha", 2)
    trigger_sync(api, "v2")
    second = eventually(
        lambda: (s := status_of(api, "modelrepositories", "models")["snapshot"]["current"]) != first and s,
        what="new snapshot",
    )
    eventually(lambda: model_status(api, "alpha").get("activeVersions") == [2], what="alpha v2 active", timeout=90)
    eventually(lambda: not ({p.name for p in cluster.pods["vision"]} & old), what="old pods replaced", timeout=60)
    for pod in _serving(cluster):
        assert _pulled(cluster, pod).startswith(f"Pulled {second}")
        assert index(pod.url)["alpha"]["2"] == "READY"
        assert infer_version(pod.url, "alpha") == "2"
    assert not events(api, "BlockedByFailedLoad") and not events(api, "ModelLoadFailed")

    # -- the source moves without a sync: a new pod refuses a snapshot other than the service's ------
    upload(s3, "alpha", 3)
    api.patch(f"{GROUP_PATH}/inferenceservices/vision", {"spec": {"replicas": 3}})
    stuck = eventually(
        lambda: next(
            (m for n, ms in cluster.init_messages.items() for m in ms if m.startswith("SnapshotMismatch")), None
        ),
        what="a pod refusing the moved source",
    )
    assert second in stuck
    assert len(_serving(cluster)) == 2  # the other two keep serving the pinned snapshot
    assert all(infer_version(p.url, "alpha") == "2" for p in _serving(cluster))
    post(f"{_serving(cluster)[0].url}/v2/repository/index", {})  # still answering
