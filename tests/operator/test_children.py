"""Child objects rendered from specs: golden files, plus the properties that matter spelled out.

Golden files are the whole object, so any change to what the operator writes shows up in review;
``UPDATE_GOLDEN=1 pytest tests/operator/test_children.py`` rewrites them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from naiad_operator.api.inferenceservice import (
    InferenceServiceSpec,
    InferenceServiceStatus,
    ModelStatus,
)
from naiad_operator.api.modelrepository import ModelRepositorySpec
from naiad_operator.reconcile import names, server, storage, syncjob
from naiad_operator.reconcile.children import ChildRef, inference_service_children
from naiad_operator.reconcile.repository_mount import RepositoryMount

from tests.operator import samples

GOLDEN = Path(__file__).parent / "golden"
IMAGE = "naiad/server:test"


def _golden(name: str, objects: list[dict[str, Any]]) -> None:
    path = GOLDEN / f"{name}.yaml"
    text = yaml.safe_dump_all(objects, sort_keys=True, width=100)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert yaml.safe_load_all(path.read_text()) is not None
    assert list(yaml.safe_load_all(path.read_text())) == objects, (
        f"{path} differs; UPDATE_GOLDEN=1 rewrites it"
    )


SHARED = RepositoryMount("models-repository", snapshot="sha256:abc")


def _service_children(
    spec: dict[str, Any],
    status: InferenceServiceStatus | None = None,
    mount: RepositoryMount = SHARED,
    fixed_ids: bool = True,
    frontend_workers: str = "",
) -> Any:
    parsed = InferenceServiceSpec.model_validate(spec)
    return inference_service_children(
        samples.OWNER_META, parsed, status or InferenceServiceStatus(), mount, IMAGE, fixed_ids, frontend_workers
    )


def test_full_inference_service_children_golden() -> None:
    kids = _service_children(samples.FULL_SERVICE_SPEC)
    assert kids.absent == ()
    _golden("inferenceservice-full", list(kids.present))


def test_no_server_pod_before_the_repositorys_first_snapshot() -> None:
    """A server started while the first sync still wrote found no models and stayed unready."""
    spec = samples.inference_service(replicas=3)["spec"]
    waiting = _service_children(spec, mount=RepositoryMount("models-repository"))
    synced = _service_children(spec)
    replicas = [
        next(o for o in kids.present if o["kind"] == "Deployment")["spec"]["replicas"]
        for kids in (waiting, synced)
    ]
    assert replicas == [0, 3]


def test_minimal_inference_service_children_golden() -> None:
    kids = _service_children(samples.inference_service()["spec"])
    assert [o["kind"] for o in kids.present] == ["ConfigMap", "Deployment", "Service"]
    assert kids.absent == (
        ChildRef("autoscaling/v2", "HorizontalPodAutoscaler", "vision"),
        ChildRef("policy/v1", "PodDisruptionBudget", "vision"),
    )
    _golden("inferenceservice-minimal", list(kids.present))


def test_server_pods_start_explicit_strict_and_locked_down() -> None:
    kids = _service_children(samples.FULL_SERVICE_SPEC)
    deployment = next(o for o in kids.present if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"][:4] == [
        "--model-repository=/repository/current",
        "--model-control-mode=explicit",
        "--strict-readiness=true",
        "--exit-on-error=false",
    ]
    assert [p["containerPort"] for p in container["ports"]] == [8000, 8001, 8002]
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] == 900
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "models-repository", "readOnly": True}
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == samples.OWNER_META["uid"]
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    # the model list is not in the pod template (changing models must not restart pods)
    assert "--load-model" not in str(deployment["spec"]["template"])
    configmap = next(o for o in kids.present if o["kind"] == "ConfigMap")
    assert configmap["data"] == {"load-model-args": "--load-model=resnet"}  # bert is optional


def test_hpa_targets_the_scale_subresource() -> None:
    hpa = next(
        o
        for o in _service_children(samples.FULL_SERVICE_SPEC).present
        if o["kind"] == "HorizontalPodAutoscaler"
    )
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "serving.naiad.dev/v1alpha1",
        "kind": "InferenceService",
        "name": "vision",
    }
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "naiad_queue_time_us"


def test_pinned_snapshot_is_the_repository_path() -> None:
    spec = InferenceServiceSpec.model_validate(
        {**samples.inference_service()["spec"], "repository": {"name": "models", "snapshot": "sha256:abc"}}
    )
    assert server.repository_path(spec, SHARED) == "/repository/snapshots/abc"


@pytest.mark.parametrize(
    ("record", "required", "expected"),
    [
        (None, True, ["m"]),  # first start: required models load at start
        (None, False, []),  # optional models never block a pod's readiness
        (ModelStatus(name="m", active_versions=[1]), False, ["m"]),  # rolled out: new pods load it too
        (ModelStatus(name="m", blocked_hashes={1: "x"}), True, []),  # known to fail: would block pods
        (ModelStatus(name="m", active_versions=[1], blocked_hashes={2: "x"}), True, ["m"]),
    ],
)
def test_startup_models(record: ModelStatus | None, required: bool, expected: list[str]) -> None:
    spec = InferenceServiceSpec.model_validate(
        {"repository": {"name": "r"}, "models": [{"name": "m", "required": required}]}
    )
    status = InferenceServiceStatus(models=[record] if record else [])
    assert server.startup_models(spec, status) == expected


def test_repository_claim_and_sync_job_golden() -> None:
    spec = ModelRepositorySpec.model_validate(samples.FULL_REPOSITORY_SPEC)
    owner = names.owner_reference("ModelRepository", {**samples.OWNER_META, "name": "models"})
    claim = storage.desired_claim("models", samples.NAMESPACE, spec, owner)
    # retentionPolicy Delete: the repository owns the claim, garbage collection deletes it (no finalizer)
    assert claim is not None and claim["metadata"]["ownerReferences"] == [owner]
    retained = spec.model_copy(update={"retention_policy": "Retain"})
    kept = storage.desired_claim("models", samples.NAMESPACE, retained, owner)
    assert kept is not None and "ownerReferences" not in kept["metadata"]
    job = syncjob.desired_sync_job(
        "models", samples.NAMESPACE, owner, spec, "models-repository", "models-sync-1", IMAGE, 3600
    )
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][4:] == [
        "s3://https://minio.ml:9000/bucket/triton",
        "/repository",
        "--keep",
        "5",
        "--verify",
        "sha256",
    ]
    assert container["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    _golden("modelrepository-full", [claim, job])


def test_existing_claim_is_not_created() -> None:
    spec = ModelRepositorySpec.model_validate(
        {"source": {"uri": "gs://b/p"}, "storage": {"claimName": "mine"}}
    )
    assert storage.desired_claim("models", "ml", spec) is None
    assert names.claim_name("models", spec.storage.claim_name) == "mine"


def test_long_names_stay_valid_and_distinct() -> None:
    a, b = "x" * 70 + "a", "x" * 70 + "b"
    assert len(names.dns_name(a)) == 63 and names.dns_name(a) != names.dns_name(b)
    assert names.dns_name("short") == "short"


def _per_pod_mount(**source: Any) -> RepositoryMount:
    repo = ModelRepositorySpec.model_validate(
        {"source": {"uri": "s3://bucket/triton", **source}, "storage": {"size": "20Gi"}}
    )
    return RepositoryMount("models-repository", repo.storage.mode, repo, "sha256:abc")


def test_per_pod_servers_never_mount_the_claim() -> None:
    """perPod: the claim stays with the sync Job; each pod pulls the pinned snapshot into its own volume."""
    mount = _per_pod_mount(credentials={"secretRef": {"name": "s3"}, "serviceAccountName": "reader"})
    kids = _service_children(samples.inference_service()["spec"], mount=mount)
    deployment = next(o for o in kids.present if o["kind"] == "Deployment")
    template = deployment["spec"]["template"]
    pod = template["spec"]
    assert "persistentVolumeClaim" not in str(pod)
    assert pod["volumes"][0] == {"name": "repository", "emptyDir": {"sizeLimit": "20Gi"}}
    pull = pod["initContainers"][0]
    assert pull["name"] == "repository"
    assert pull["command"][4:] == ["s3://bucket/triton", "/repository", "--keep", "1"]
    assert {"name": "NAIAD_EXPECTED_SNAPSHOT", "value": "sha256:abc"} in pull["env"]
    assert pull["envFrom"] == [{"secretRef": {"name": "s3"}}]
    assert pod["serviceAccountName"] == "reader"  # the init step reads the source with its identity
    assert template["metadata"]["annotations"] == {"serving.naiad.dev/snapshot": "sha256:abc"}
    # the server reads the copy's current snapshot, even when the service pins one
    assert pod["containers"][0]["args"][0] == "--model-repository=/repository/current"
    assert "server" not in [c["name"] for c in pod["initContainers"]]


def _server_env(kids: Any) -> dict[str, Any]:
    pod = next(o for o in kids.present if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "server")
    return {item["name"]: item.get("value") for item in container["env"]}


def test_frontend_workers_default_reaches_server_pods_unless_the_service_sets_it() -> None:
    spec = samples.inference_service()["spec"]
    assert "NAIAD_FRONTEND_WORKERS" not in _server_env(_service_children(spec))
    assert _server_env(_service_children(spec, frontend_workers="8"))["NAIAD_FRONTEND_WORKERS"] == "8"
    own = {**spec, "server": {**spec.get("server", {}), "env": [{"name": "NAIAD_FRONTEND_WORKERS", "value": "0"}]}}
    assert _server_env(_service_children(own, frontend_workers="8"))["NAIAD_FRONTEND_WORKERS"] == "0"


def test_platform_assigned_user_ids() -> None:
    """OpenShift restricted-v2 assigns UID/GID/fsGroup; fixed ones would be refused."""
    kids = _service_children(samples.inference_service()["spec"], fixed_ids=False)
    pod = next(o for o in kids.present if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    spec = {**samples.inference_service()["spec"], "podTemplate": {"securityContext": {"runAsNonRoot": True}}}
    pod = next(o for o in _service_children(spec).present if o["kind"] == "Deployment")
    assert pod["spec"]["template"]["spec"]["securityContext"] == {"runAsNonRoot": True}


def test_sync_job_template_and_file_credentials() -> None:
    spec = ModelRepositorySpec.model_validate(samples.FULL_REPOSITORY_SPEC)
    owner = names.owner_reference("ModelRepository", {**samples.OWNER_META, "name": "models"})
    job = syncjob.desired_sync_job(
        "models", samples.NAMESPACE, owner, spec, "models-repository", "models-sync-1", IMAGE, 3600
    )
    template = job["spec"]["template"]
    pod, container = template["spec"], template["spec"]["containers"][0]
    assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert template["metadata"]["labels"]["team"] == "vision"
    assert pod["nodeSelector"] == {"pool": "gpu"} and pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert pod["imagePullSecrets"] == [{"name": "registry"}] and pod["priorityClassName"] == "batch"
    assert pod["serviceAccountName"] == "repo-reader"  # together with the Secret
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GOOGLE_APPLICATION_CREDENTIALS"] == "/var/run/naiad/credentials/gcs/key.json"
    assert env["AWS_CA_BUNDLE"] == "/var/run/naiad/credentials/ca/ca-bundle.pem"
    assert env["AWS_DEFAULT_REGION"] == "eu-west-1" and env["NAIAD_S3_ADDRESSING_STYLE"] == "path"
    assert "NAIAD_S3_VERIFY_TLS" not in env and env["HTTPS_PROXY"] == "http://proxy:3128"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["gcs-key"]["secret"] == {
        "secretName": "gcs-key",
        "items": [{"key": "key.json", "path": "key.json"}],
    }
    assert volumes["ca-bundle"]["secret"]["items"] == [{"key": "ca.crt", "path": "ca-bundle.pem"}]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/var/run/naiad/credentials/gcs", "/var/run/naiad/credentials/ca", "/scratch"} <= mounts
    unverified = spec.model_copy(update={"source": spec.source.model_copy(update={"verify_tls": False})})
    job = syncjob.desired_sync_job("models", "ml", owner, unverified, "c", "j", IMAGE, 60)
    assert {"name": "NAIAD_S3_VERIFY_TLS", "value": "false"} in job["spec"]["template"]["spec"]["containers"][
        0
    ]["env"]


@pytest.mark.parametrize(
    ("server", "platform", "expected"),
    [
        ({}, "", None),  # nothing set anywhere: the server decides
        ({}, "8", "8"),  # the operator's platform-wide default
        ({"resources": {"limits": {"cpu": "2"}}}, "8", "0"),  # 2 CPUs: a second process only adds a hop
        ({"resources": {"limits": {"cpu": "8"}, "requests": {"cpu": "1"}}}, "", "4"),  # the limit first
        ({"resources": {"requests": {"cpu": "6500m"}}}, "", "3"),  # no limit: the request
        ({"resources": {"limits": {"cpu": "64"}}}, "", "16"),  # at most 16, as the server's auto
        ({"resources": {"limits": {"cpu": "64"}}, "frontendWorkers": 1}, "8", "1"),  # the field wins
    ],
)
def test_frontend_workers_follow_the_server_containers_cpu(
    server: dict[str, Any], platform: str, expected: str | None
) -> None:
    spec = {**samples.inference_service()["spec"], "server": server}
    assert (
        _server_env(_service_children(spec, frontend_workers=platform)).get("NAIAD_FRONTEND_WORKERS")
        == expected
    )
