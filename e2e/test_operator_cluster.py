"""The operator in a real cluster: what KMock cannot show.

Admission (schema and CEL rules), the scale subresource, status that does not bump ``generation``,
ownerReference garbage collection, the finalizer's retention policy, and the whole lifecycle with a real
kubelet: sync Job -> snapshot -> server pods Ready with their models -> in-place rollouts.

Needs: the CRDs and the operator installed (``kubectl apply -f crds/`` and the operator Deployment), the
server image loaded into the cluster, and an S3 endpoint reachable from pods with a bucket holding a
Triton repository (``E2E_S3_URI``, ``E2E_S3_ENDPOINT``, ``E2E_S3_SECRET``: a Secret with AWS_* keys).
See e2e/README.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

NS = os.environ.get("E2E_NAMESPACE", "naiad-e2e")


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(
        ["kubectl", "-n", NS, *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr}")
    return done.stdout + done.stderr


def get(kind: str, name: str) -> dict[str, Any]:
    return json.loads(kubectl("get", kind, name, "-o", "json"))


def eventually(check: Callable[[], Any], timeout: float = 300.0) -> Any:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except AssertionError as exc:
            last = exc
        time.sleep(2)
    raise AssertionError(f"timed out; last: {last!r}")


def condition(obj: dict[str, Any], type_: str) -> str | None:
    return next(
        (c["status"] for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_), None
    )


@pytest.fixture(scope="module")
def namespace() -> Iterator[str]:
    subprocess.run(["kubectl", "create", "namespace", NS], capture_output=True)
    yield NS
    subprocess.run(["kubectl", "delete", "namespace", NS, "--wait=false"], capture_output=True)


def repository(name: str, retention: str = "Retain") -> str:
    return json.dumps(
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "ModelRepository",
            "metadata": {"name": name},
            "spec": {
                "source": {
                    "uri": os.environ.get("E2E_S3_URI", "s3://models/triton"),
                    "endpoint": os.environ.get("E2E_S3_ENDPOINT", "http://seaweedfs.naiad-e2e:8333"),
                    "credentials": {"secretRef": {"name": os.environ.get("E2E_S3_SECRET", "s3-creds")}},
                },
                "storage": {"size": "1Gi"},  # perPod (the default) on the default StorageClass
                "retentionPolicy": retention,
            },
        }
    )


def service(name: str, models: list[str]) -> str:
    return json.dumps(
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": name},
            "spec": {
                "repository": {"name": "models"},
                "models": [{"name": m} for m in models],
                "server": {
                    "image": os.environ.get("E2E_SERVER_IMAGE", "naiad/server:e2e"),
                    "imagePullPolicy": "IfNotPresent",
                },
            },
        }
    )


def test_admission_rejects_bad_specs(namespace: str) -> None:
    bad = json.loads(service("bad", ["m"]))
    bad["spec"]["autoscaling"] = {"minReplicas": 5, "maxReplicas": 2}
    out = kubectl("apply", "-f", "-", stdin=json.dumps(bad), check=False)
    assert "minReplicas must not exceed maxReplicas" in out
    bad = json.loads(repository("bad"))
    bad["spec"]["source"]["uri"] = "http://not-a-bucket"
    assert "spec.source.uri" in kubectl("apply", "-f", "-", stdin=json.dumps(bad), check=False)
    # CEL: shared storage on ReadWriteOnce would hit Multi-Attach on a second node
    bad = json.loads(repository("bad"))
    bad["spec"]["storage"] = {"mode": "shared", "accessModes": ["ReadWriteOnce"]}
    refused = kubectl("apply", "-f", "-", stdin=json.dumps(bad), check=False)
    assert "needs accessModes [ReadWriteMany]" in refused
    assert (
        "versionPolicy"
        in subprocess.run(
            ["kubectl", "explain", "inferenceservices.spec.models"], capture_output=True, text=True
        ).stdout
    )


def test_lifecycle(namespace: str) -> None:
    kubectl("apply", "-f", "-", stdin=repository("models"))
    repo = eventually(
        lambda: (
            get("modelrepository", "models")["status"].get("phase") == "Ready"
            and get("modelrepository", "models")
        )
    )
    models = [m["name"] for m in repo["status"]["models"]]
    assert models, "the E2E bucket holds no models"
    kubectl("apply", "-f", "-", stdin=service("svc", models[:1]))
    isvc = eventually(
        lambda: (
            condition(get("inferenceservice", "svc"), "Ready") == "True" and get("inferenceservice", "svc")
        )
    )
    generation = isvc["metadata"]["generation"]
    assert isvc["status"]["models"][0]["transitionStatus"] == "UpToDate"
    assert isvc["status"]["observedGeneration"] == generation  # status writes did not bump generation
    # scale subresource: kubectl scale drives the Deployment through the operator
    kubectl("scale", "inferenceservice", "svc", "--replicas=2")
    eventually(lambda: get("deployment", "svc")["spec"]["replicas"] == 2)
    eventually(lambda: get("inferenceservice", "svc")["status"].get("readyReplicas") == 2)
    # a second model is loaded in place: no pod restarts
    pods_before = kubectl("get", "pods", "-l", "serving.naiad.dev/inferenceservice=svc", "-o", "name")
    if len(models) > 1:
        kubectl(
            "patch",
            "inferenceservice",
            "svc",
            "--type=merge",
            "-p",
            json.dumps({"spec": {"models": [{"name": m} for m in models[:2]]}}),
        )
        eventually(
            lambda: all(
                m["transitionStatus"] == "UpToDate"
                for m in get("inferenceservice", "svc")["status"]["models"]
            )
        )
        assert (
            kubectl("get", "pods", "-l", "serving.naiad.dev/inferenceservice=svc", "-o", "name")
            == pods_before
        )
    # manual trigger: a new sync Job
    kubectl(
        "patch",
        "modelrepository",
        "models",
        "--type=merge",
        "-p",
        json.dumps({"spec": {"sync": {"trigger": uuid.uuid4().hex}}}),
    )
    eventually(lambda: get("modelrepository", "models")["status"].get("syncCount", 0) >= 2)
    # deletion cascades to owned children; the claim survives under Retain
    kubectl("delete", "inferenceservice", "svc")
    eventually(lambda: "NotFound" in kubectl("get", "deployment", "svc", check=False))
    kubectl("delete", "modelrepository", "models")
    eventually(lambda: "NotFound" in kubectl("get", "modelrepository", "models", check=False))
    assert "models-repository" in kubectl("get", "pvc", "models-repository", check=False)
