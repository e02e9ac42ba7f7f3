"""Status that says why, end to end: the simulated cluster plays the scheduler (GPUs per node, node
selectors), the registry (an image that does not exist), the attach controller (a ReadWriteOnce volume
on a second node) and the kubelet (a server that exits at start), with their own words in pod status
and Events; the InferenceService and ModelRepository status must carry those words.
"""

from __future__ import annotations

from typing import Any

from tests.operator.cluster import NS, Api, FakeCluster
from tests.operator.harness import GROUP_PATH, eventually, status_of, upload

CLUSTER: dict[str, Any] = {
    "nodes": {
        "node-0": {"pool": "gpu", "kubernetes.io/hostname": "node-0"},
        "node-1": {"pool": "gpu", "kubernetes.io/hostname": "node-1"},
    },
    "gpus_per_node": 1,
    "missing_images": {"registry.example/naiad:typo"},
}


def _create(api: Api, plural: str, name: str, spec: dict[str, Any]) -> None:
    kind = {"modelrepositories": "ModelRepository", "inferenceservices": "InferenceService"}[plural]
    api.create(
        f"{GROUP_PATH}/{plural}",
        {"apiVersion": "serving.naiad.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec},
    )


def _condition(api: Api, plural: str, name: str, type_: str) -> dict[str, Any]:
    found = [c for c in status_of(api, plural, name).get("conditions") or [] if c["type"] == type_]
    return found[0] if found else {}


def _replicas(api: Api, name: str) -> dict[str, dict[str, Any]]:
    models = status_of(api, "inferenceservices", name).get("models") or []
    return {r["pod"]: r for r in (models[0].get("replicas") or [])} if models else {}


def test_status_says_why(s3: Any, cluster: FakeCluster, operator: Any) -> None:
    api = cluster.api
    upload(s3, "alpha", 1)
    api.create(
        f"/api/v1/namespaces/{NS}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-creds"}, "stringData": s3.env()},
    )
    # a team's own ReadWriteOnce claim (the CRD cannot check a claim it did not create)
    api.create(
        f"/api/v1/namespaces/{NS}/persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "team-disk"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    source = {
        "uri": "s3://models/triton",
        "endpoint": s3.endpoint,
        "credentials": {"secretRef": {"name": "s3-creds"}},
    }

    # -- a sync Job that no node takes: the repository says so, in the scheduler's words ----------------
    _create(
        api,
        "modelrepositories",
        "models",
        {
            "source": source,
            "storage": {"mode": "shared", "claimName": "team-disk"},
            "sync": {"template": {"nodeSelector": {"pool": "cpu"}}},
        },
    )
    synced = eventually(
        lambda: (
            (c := _condition(api, "modelrepositories", "models", "Synced")).get("reason") == "Unschedulable"
            and c
        ),
        what="Synced=False/Unschedulable",
    )
    assert "didn't match Pod's node affinity/selector" in synced["message"]
    api.patch(
        f"{GROUP_PATH}/modelrepositories/models", {"spec": {"sync": {"template": {"nodeSelector": None}}}}
    )
    eventually(
        lambda: status_of(api, "modelrepositories", "models").get("phase") == "Ready", what="repository Ready"
    )

    # -- a typo in the image: ImagePullBackOff; then the Deployment's progress deadline passes ---------
    _create(
        api,
        "inferenceservices",
        "typo",
        {
            "repository": {"name": "models"},
            "models": [{"name": "alpha"}],
            "server": {"image": "registry.example/naiad:typo"},
            "podTemplate": {"nodeSelector": {"kubernetes.io/hostname": "node-0"}},
            "rollout": {"progressDeadlineSeconds": 3},
        },
    )
    server = eventually(
        lambda: (
            (c := _condition(api, "inferenceservices", "typo", "ServerAvailable")).get("reason")
            == "ImagePullBackOff"
            and c
        ),
        what="ServerAvailable=False/ImagePullBackOff",
    )
    assert 'Back-off pulling image "registry.example/naiad:typo"' in server["message"]
    assert next(iter(_replicas(api, "typo").values()))["state"] == "ImagePullBackOff"
    eventually(
        lambda: (
            _condition(api, "inferenceservices", "typo", "Progressing").get("reason")
            == "ProgressDeadlineExceeded"
        ),
        what="Progressing/ProgressDeadlineExceeded",
    )

    # -- a server that exits at start: CrashLoopBackOff with the server's own last error --------------
    _create(
        api,
        "inferenceservices",
        "crashy",
        {
            "repository": {"name": "models"},
            "models": [{"name": "alpha"}],
            "server": {"args": ["--log-verbose=loud"]},
            "podTemplate": {"nodeSelector": {"kubernetes.io/hostname": "node-0"}},
        },
    )
    crash = eventually(
        lambda: (
            (c := _condition(api, "inferenceservices", "crashy", "ServerAvailable")).get("reason")
            == "CrashLoopBackOff"
            and c
        ),
        what="ServerAvailable=False/CrashLoopBackOff",
    )
    assert "--log-verbose" in crash["message"] and "loud" in crash["message"], crash

    # -- GPU pods on two nodes over a ReadWriteOnce claim: Multi-Attach; a third finds no GPU ----------
    _create(
        api,
        "inferenceservices",
        "vision",
        {
            "repository": {"name": "models"},
            "models": [{"name": "alpha"}],
            "server": {"gpus": 1},
            "replicas": 2,
        },
    )
    eventually(
        lambda: "MultiAttach" in {r["state"] for r in _replicas(api, "vision").values()}, what="MultiAttach"
    )
    attach = next(r for r in _replicas(api, "vision").values() if r["state"] == "MultiAttach")
    assert "Volume is already used by pod(s)" in attach["reason"]
    ready = _condition(api, "inferenceservices", "vision", "Ready")
    assert ready["status"] == "False" and ready["reason"] == "MultiAttach", ready
    api.patch(f"{GROUP_PATH}/inferenceservices/vision", {"spec": {"replicas": 3}})
    try:
        gpu = eventually(
            lambda: next(
                (r for r in _replicas(api, "vision").values() if r["state"] == "InsufficientGPU"), None
            ),
            what="InsufficientGPU",
        )
    except AssertionError as exc:
        pods = api.items(f"/api/v1/namespaces/{NS}/pods")
        raise AssertionError(
            f"{exc}; replicas {_replicas(api, 'vision')}; pods {[(p['metadata']['name'], p.get('status')) for p in pods]}"
            f"; fake {[(p.name, p.node, p.pending, p.gpus) for ps in cluster.pods.values() for p in ps]}"
        ) from exc
    assert "2 Insufficient nvidia.com/gpu" in gpu["reason"]
