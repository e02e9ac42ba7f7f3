"""``passive`` instance groups, as in Triton: their instances are loaded and initialized (a backend
may hand work to them itself) but the scheduler never sends them a request, they get no warmup and
no rate-limiter gate, and they are finalized with their version.  A model of passive instances only
would never answer, so it fails to load, saying why.  The model records each instance's
``initialize`` and ``finalize`` in files and answers with the name of the instance that ran."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.models import write_model
from tests.support.server import ServerProcess

MODEL_PY = """
import json, os, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.folder = config["parameters"]["folder"]["string_value"]
        self.name = args["model_instance_name"]
        open(os.path.join(self.folder, "initialize-" + self.name), "w").close()

    def execute(self, requests):
        time.sleep(0.1)  # (long enough that concurrent requests spread over the instances)
        name = np.array([self.name.encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", name)]) for _ in requests]

    def finalize(self):
        open(os.path.join(self.folder, "finalize-" + self.name), "w").close()
"""


def _config(folder: Path, groups: str) -> str:
    return f"""
        backend: "python"
        input [{{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }}]
        output [{{ name: "OUTPUT0" data_type: TYPE_STRING dims: [ 1 ] }}]
        instance_group [ {groups} ]
        parameters {{ key: "folder" value {{ string_value: "{folder}" }} }}
        """


@pytest.fixture(scope="module")
def passive_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    root, folder = tmp_path_factory.mktemp("passive_models"), tmp_path_factory.mktemp("passive_calls")
    groups = '{ name: "active" kind: KIND_CPU count: 2 }, { name: "standby" kind: KIND_CPU count: 2 passive: true }'
    write_model(root, "mixed", _config(folder, groups), MODEL_PY)
    elsewhere = tmp_path_factory.mktemp("only_passive_calls")
    write_model(root, "only_passive", _config(elsewhere, "{ kind: KIND_CPU passive: true }"), MODEL_PY)
    args = ["--model-control-mode=explicit", "--load-model=mixed"]
    with ServerProcess([root], args) as server:
        yield server, folder


def _served_by(server: ServerProcess) -> str:
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("INPUT0", [1], "INT32")
        tensor.set_data_from_numpy(np.zeros(1, np.int32))
        return str(client.infer("mixed", [tensor]).as_numpy("OUTPUT0")[0].decode())


def test_passive_instances_are_initialized_and_never_scheduled(passive_server: tuple[ServerProcess, Path]) -> None:
    server, folder = passive_server
    initialized = sorted(p.name for p in folder.glob("initialize-*"))
    assert initialized == [f"initialize-{g}_{i}" for g in ("active", "standby") for i in (0, 1)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        served = set(pool.map(lambda _: _served_by(server), range(24)))
    assert served == {"active_0", "active_1"}  # both active ones busy, the passive ones never
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/mixed/config") as answer:
        groups = json.loads(answer.read())["instance_group"]
    assert [(g["name"], g["passive"]) for g in groups] == [("active", False), ("standby", True)]


def test_a_model_of_passive_instances_only_fails_to_load(passive_server: tuple[ServerProcess, Path]) -> None:
    server, _ = passive_server
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/models/only_passive/load", data=b"")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request)
    assert refused.value.code == 400
    assert "has only passive instances" in json.loads(refused.value.read())["error"]


def test_passive_instances_are_finalized_with_their_version(passive_server: tuple[ServerProcess, Path]) -> None:
    server, folder = passive_server
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/models/mixed/unload", data=b"")
    urllib.request.urlopen(request).close()
    with urllib.request.urlopen(
        urllib.request.Request(f"http://{server.http_url}/v2/repository/index", data=b"{}")
    ) as answer:
        assert [m["state"] for m in json.loads(answer.read()) if m["name"] == "mixed"] == ["UNAVAILABLE"]
    finalized = sorted(p.name for p in folder.glob("finalize-*"))
    assert finalized == [f"finalize-{g}_{i}" for g in ("active", "standby") for i in (0, 1)]
