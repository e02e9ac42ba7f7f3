"""Triton's instance update: a model loaded again with only its ``instance_group`` changed keeps the
instances it has, creates only those added and finalizes only those removed; statistics carry on; a
request running on a kept instance neither blocks the update nor fails.  Any other change loads the
version anew.  The model counts its ``initialize`` and ``finalize`` calls in files, as NVIDIA's
``model_init_del`` does, so the test reads what really ran."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.models import write_model
from tests.support.server import ServerProcess

MODEL_PY = """
import fcntl, json, os, time
import numpy as np
import triton_python_backend_utils as pb_utils

COUNTS = os.environ["NAIAD_TEST_COUNTS"]

def bump(kind):
    path = os.path.join(COUNTS, kind)
    with open(path, "a+") as f:
        fcntl.lockf(f, fcntl.LOCK_EX)
        f.write("x")

class TritonPythonModel:
    def initialize(self, args):
        if os.path.exists(os.path.join(COUNTS, "refuse")):
            raise Exception("this instance refuses to start")
        bump("initialize")

    def execute(self, requests):
        responses = []
        for request in requests:
            gate = json.loads(request.parameters()).get("gate")
            if gate:
                open(gate + ".started", "w").close()
                deadline = time.monotonic() + 30
                while not os.path.exists(gate) and time.monotonic() < deadline:
                    time.sleep(0.01)
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data * 2)]))
        return responses

    def finalize(self):
        bump("finalize")
"""


def _config(groups: str, extra: str = "") -> str:
    return f"""
    name: "counted"
    backend: "python"
    input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] }}]
    output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] }}]
    instance_group [ {groups} ]
    {extra}
    """


@pytest.fixture
def counts(tmp_path: Path) -> Path:
    folder = tmp_path / "counts"
    folder.mkdir()
    return folder


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    write_model(repo, "counted", _config("{ count: 2 kind: KIND_CPU }"), MODEL_PY)
    return repo


@pytest.fixture
def server(repo: Path, counts: Path) -> Iterator[ServerProcess]:
    env = {"NAIAD_TEST_COUNTS": str(counts)}
    with ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=counted"], env=env) as process:
        yield process


def _count(counts: Path, kind: str) -> int:
    path = counts / kind
    return len(path.read_text()) if path.exists() else 0


def _counted(counts: Path) -> tuple[int, int]:
    return _count(counts, "initialize"), _count(counts, "finalize")


def _infer(client: grpcclient.InferenceServerClient, gate: Path | None = None) -> None:
    tensor = grpcclient.InferInput("INPUT0", [2], "FP32")
    tensor.set_data_from_numpy(np.array([1.0, 2.0], dtype=np.float32))
    parameters = {"gate": str(gate)} if gate is not None else None
    result = client.infer("counted", [tensor], parameters=parameters)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [2.0, 4.0])


def _success_count(client: grpcclient.InferenceServerClient) -> int:
    stats = client.get_inference_statistics("counted", as_json=True)["model_stats"][0]
    return int(stats["inference_stats"]["success"].get("count", 0))


def _reload(client: grpcclient.InferenceServerClient, repo: Path, config: str) -> None:
    (repo / "counted" / "config.pbtxt").write_text(config)
    client.load_model("counted")


def test_only_the_instances_added_or_removed_initialize_or_finalize(
    server: ServerProcess, repo: Path, counts: Path
) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert _counted(counts) == (2, 0)
        for _ in range(3):
            _infer(client)
        _reload(client, repo, _config("{ count: 3 kind: KIND_CPU }"))
        assert _counted(counts) == (3, 0)  # one instance added, the two there kept
        assert _success_count(client) == 3  # the same version to its statistics
        _infer(client)
        _reload(client, repo, _config("{ name: 'renamed' count: 1 kind: KIND_CPU }"))
        assert _counted(counts) == (3, 2)  # two removed, finalized before the load returned
        _reload(
            client,
            repo,
            _config("{ count: 1 kind: KIND_CPU }", 'parameters { key: "k" value: { string_value: "v" } }'),
        )
        assert _counted(counts) == (4, 3)  # anything else changed: the version loads anew
        assert _success_count(client) == 0
        _infer(client)
        config = client.get_model_config("counted", as_json=True)["config"]
        assert [int(group["count"]) for group in config["instance_group"]] == [1]
        client.unload_model("counted")
        deadline = time.monotonic() + 30
        while _counted(counts) != (4, 4):
            assert time.monotonic() < deadline, _counted(counts)
            time.sleep(0.05)


def test_a_request_running_on_a_kept_instance_does_not_hold_the_update(
    server: ServerProcess, repo: Path, counts: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        running = threading.Thread(target=_infer, args=(client, gate))
        running.start()
        deadline = time.monotonic() + 30
        while not Path(f"{gate}.started").exists():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        started = time.monotonic()
        _reload(client, repo, _config("{ count: 4 kind: KIND_CPU }"))
        assert time.monotonic() - started < 10  # (the gated request would hold it up to 30 s)
        assert _counted(counts) == (4, 0)
        _infer(client)  # served by the new instances meanwhile
        assert running.is_alive()
        gate.touch()
        running.join(30)
        assert not running.is_alive()
    assert os.path.exists(f"{gate}.started")


def test_a_failed_update_leaves_the_old_instances_serving(
    server: ServerProcess, repo: Path, counts: Path
) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        (counts / "refuse").touch()  # the instance to add fails to start
        with pytest.raises(InferenceServerException, match="this instance refuses to start"):
            _reload(client, repo, _config("{ count: 3 kind: KIND_CPU }"))
        assert _counted(counts) == (2, 0)  # the two instances kept were neither closed nor restarted
        for _ in range(4):
            _infer(client)
        (counts / "refuse").unlink()
        _reload(client, repo, _config("{ count: 1 kind: KIND_CPU }"))
        assert _counted(counts) == (2, 1)
        _infer(client)
        client.unload_model("counted")
        deadline = time.monotonic() + 30
        while _counted(counts) != (2, 2):
            assert time.monotonic() < deadline, _counted(counts)
            time.sleep(0.05)
