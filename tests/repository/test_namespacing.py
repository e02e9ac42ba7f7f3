"""``--model-namespacing``: each repository a namespace, so two repositories may hold a model of the
same name, as in NVIDIA's ``L0_model_namespacing``.

Two repositories each hold a ``composing`` model (marked ``a`` or ``b``, so an answer says which one
served it) and an ensemble that steps through ``composing``.  Each ensemble must use its own
repository's ``composing``, a request naming ``composing`` itself is refused as ambiguous (Triton's
words), and when one repository's ``composing`` goes away its ensemble falls back to the other one.
Both server modes: a frontend worker resolves names in its copy of the engine's catalog.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.repository.models import write_marked
from tests.support.models import write_model
from tests.support.modes import WORKERS
from tests.support.server import ServerProcess

AMBIGUOUS = (
    "There are 2 identifiers of model 'composing' in global map, model namespace must be provided to "
    "resolve ambiguity."
)

ENSEMBLE = """
name: "{name}"
platform: "ensemble"
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_STRING dims: [ 1 ] }} ]
ensemble_scheduling {{
  step [
    {{ model_name: "composing" model_version: -1 input_map {{ key: "INPUT0" value: "IN" }}
      output_map {{ key: "MARK" value: "OUT" }} }}
  ]
}}
"""


def _repositories(root: Path) -> tuple[Path, Path]:
    """``a/{composing (a), pipeline_a}`` and ``b/{composing (b), pipeline_b}``."""
    first, second = root / "a", root / "b"
    for repo, mark in ((first, "a"), (second, "b")):
        write_marked(repo, "composing", mark)
        write_model(repo, f"pipeline_{mark}", ENSEMBLE.format(name=f"pipeline_{mark}"))
    return first, second


def _mark(client: httpclient.InferenceServerClient, model: str, output: str = "MARK") -> str:
    """Which ``composing`` answered a request for ``model`` (its mark, without the version)."""
    name = "IN" if model.startswith("pipeline") else "INPUT0"
    tensor = httpclient.InferInput(name, [1], "INT32")
    tensor.set_data_from_numpy(np.array([3], dtype=np.int32))
    result = client.infer(model, [tensor])
    value = result.as_numpy("OUT" if model.startswith("pipeline") else output)
    assert value is not None
    return str(value.reshape(-1)[0].decode()).split(":")[0]


def _http(server: ServerProcess, path: str, body: object = None) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://{server.http_url}{path}", data=data, method="GET" if body is None else "POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _eventually(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@pytest.mark.parametrize("frontend_workers", [0, WORKERS], ids=["in-process", "workers"])
def test_each_ensemble_uses_its_own_repositorys_model_and_a_shared_name_is_ambiguous(
    tmp_path: Path, frontend_workers: int
) -> None:
    first, second = _repositories(tmp_path)
    args = ["--model-namespacing=true"]
    with ServerProcess([first, second], args, frontend_workers=frontend_workers) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_server_ready()
        assert _mark(client, "pipeline_a") == "a"
        assert _mark(client, "pipeline_b") == "b"

        # a name two repositories hold: every API that resolves it refuses, in Triton's words
        tensor = httpclient.InferInput("INPUT0", [1], "INT32")
        tensor.set_data_from_numpy(np.array([3], dtype=np.int32))
        with pytest.raises(InferenceServerException) as refused:
            client.infer("composing", [tensor])
        assert refused.value.status() == "400" and refused.value.message() == AMBIGUOUS
        for path in ("/v2/models/composing", "/v2/models/composing/config"):
            assert _http(server, path) == (400, json.dumps({"error": AMBIGUOUS}, separators=(",", ":")))
        assert not client.is_model_ready("composing")
        assert _http(server, "/v2/models/composing/stats") == (
            400,
            '{"error":"requested model \'composing\' is not available"}',
        )
        assert _http(server, "/v2/models/composing/trace/setting") == (
            400,
            '{"error":"Request for unknown model : composing"}',
        )
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        gtensor = grpcclient.InferInput("INPUT0", [1], "INT32")
        gtensor.set_data_from_numpy(np.array([3], dtype=np.int32))
        with pytest.raises(InferenceServerException) as grpc_refused:
            grpc.infer("composing", [gtensor])
        assert grpc_refused.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert grpc_refused.value.message() == AMBIGUOUS

        # a model's key (its name, a NUL, its repository) is no name: it finds nothing, and the
        # ambiguous name stays ambiguous (a URL's %00, a gRPC string)
        keyed = f"composing\x00{first}"
        unknown = f"Request for unknown model: '{keyed}' is not found"
        body = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "INT32", "data": [3]}]}
        assert _http(server, f"/v2/models/{quote(keyed, safe='')}/infer", body) == (
            404,
            json.dumps({"error": unknown}, separators=(",", ":")),
        )
        assert _http(server, f"/v2/models/{quote(keyed, safe='')}/ready")[0] == 400
        with pytest.raises(InferenceServerException) as grpc_unknown:
            grpc.infer(keyed, [gtensor])
        assert grpc_unknown.value.status() == "StatusCode.NOT_FOUND"
        assert grpc_unknown.value.message() == unknown
        assert not grpc.is_model_ready(keyed)

        # both listed, each with its own statistics and metrics (a namespace label, as Triton's)
        index = sorted((e["name"], e["state"]) for e in client.get_model_repository_index())
        assert index == [
            ("composing", "READY"),
            ("composing", "READY"),
            ("pipeline_a", "READY"),
            ("pipeline_b", "READY"),
        ]
        stats = client.get_inference_statistics()["model_stats"]
        counts = sorted((s["name"], s["inference_stats"]["success"]["count"]) for s in stats)
        assert counts == [("composing", 1), ("composing", 1), ("pipeline_a", 1), ("pipeline_b", 1)]
        with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as answer:
            metrics = answer.read().decode()
        for repo in (first, second):
            line = f'nv_inference_request_success{{model="composing",namespace="{repo}",version="1"}} 1'
            assert line in metrics


def test_a_removed_model_falls_back_to_the_other_repositorys_and_back(tmp_path: Path) -> None:
    """POLL: ``a``'s ``composing`` removed, ``pipeline_a`` runs ``b``'s (the only one left) and the
    name is no longer ambiguous; put back, each ensemble has its own again."""
    first, second = _repositories(tmp_path)
    args = ["--model-namespacing=true", "--model-control-mode=poll", "--repository-poll-secs=1"]
    with ServerProcess([first, second], args) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert _mark(client, "pipeline_a") == "a"
        shutil.move(first / "composing", tmp_path / "parked")
        _eventually(lambda: len(client.get_model_repository_index()) == 3)
        assert _mark(client, "composing") == "b"
        assert _mark(client, "pipeline_a") == "b"
        assert _mark(client, "pipeline_b") == "b"

        shutil.move(tmp_path / "parked", first / "composing")
        _eventually(lambda: not client.is_model_ready("composing"))  # ambiguous again once loaded
        assert _mark(client, "pipeline_a") == "a"
        assert _mark(client, "pipeline_b") == "b"


def test_explicit_loads_and_unloads_act_on_every_repositorys_model_of_a_name(tmp_path: Path) -> None:
    first, second = _repositories(tmp_path)
    args = ["--model-namespacing=true", "--model-control-mode=explicit"]
    with ServerProcess([first, second], args) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        client.load_model("pipeline_b")  # its own repository's step, the only one loaded
        assert _mark(client, "pipeline_b") == "b"
        assert _mark(client, "composing") == "b"

        client.load_model("composing")  # both repositories'
        states = sorted((e["name"], e.get("state", "")) for e in client.get_model_repository_index())
        assert states == [
            ("composing", "READY"),
            ("composing", "READY"),
            ("pipeline_a", ""),
            ("pipeline_b", "READY"),
        ]
        assert not client.is_model_ready("composing")

        client.load_model("pipeline_a")
        assert _mark(client, "pipeline_a") == "a"

        client.unload_model("composing")  # both again
        rows = [e for e in client.get_model_repository_index() if e["name"] == "composing"]
        assert [(e["state"], e["reason"]) for e in rows] == [("UNAVAILABLE", "unloaded")] * 2


def test_namespacing_with_models_loaded_on_demand_is_refused_at_start(tmp_path: Path) -> None:
    first, second = _repositories(tmp_path)
    args = ["--model-namespacing=true", "--load-on-demand=*"]
    with pytest.raises(RuntimeError) as failed:
        ServerProcess([first, second], args, wait_ready=False).start()
    assert "--model-namespacing cannot be combined with --load-on-demand" in str(failed.value)
