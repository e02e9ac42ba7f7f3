"""Helpers of the end-to-end operator tests: polling, the servers' own answers, status readers."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.operator.cluster import NS, Api
from tests.support.models import IDENTITY_PY, identity_config

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


def eventually(check: Callable[[], T], timeout: float = 90.0, what: str = "") -> T:
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


def post(url: str, body: Any) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


def index(url: str) -> dict[str, dict[str, str]]:
    """model -> version -> state, from the server itself."""
    result: dict[str, dict[str, str]] = {}
    for entry in post(f"{url}/v2/repository/index", {}):
        result.setdefault(entry["name"], {})
        if entry.get("version"):
            result[entry["name"]][entry["version"]] = entry["state"]
    return result


def ready_versions(url: str, model: str) -> tuple[int, ...]:
    return tuple(sorted(int(v) for v, s in index(url).get(model, {}).items() if s == "READY"))


def infer_version(url: str, model: str) -> str:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    return str(post(f"{url}/v2/models/{model}/infer", body)["model_version"])


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


def upload(s3: Any, name: str, version: int, model_py: str = IDENTITY_PY) -> None:
    client = s3.client()
    client.put_object(
        Bucket=BUCKET, Key=f"triton/{name}/config.pbtxt", Body=identity_config(name, "TYPE_FP32").encode()
    )
    client.put_object(Bucket=BUCKET, Key=f"triton/{name}/{version}/model.py", Body=model_py.encode())


def create_s3_repository(api: Api, s3: Any, storage: dict[str, Any] | None = None) -> None:
    """The Secret with the S3 store's keys and a ModelRepository ``models`` over ``s3://models/triton``
    (``storage`` as given, or left to the CRD's defaults)."""
    api.create(
        f"/api/v1/namespaces/{NS}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s3-creds", "namespace": NS},
            "stringData": s3.env(),
        },
    )
    spec: dict[str, Any] = {
        "source": {
            "uri": f"s3://{BUCKET}/triton",
            "endpoint": s3.endpoint,
            "credentials": {"secretRef": {"name": "s3-creds"}},
        }
    }
    if storage is not None:
        spec["storage"] = storage
    api.create(
        f"{GROUP_PATH}/modelrepositories",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "ModelRepository",
            "metadata": {"name": "models", "namespace": NS},
            "spec": spec,
        },
    )


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


