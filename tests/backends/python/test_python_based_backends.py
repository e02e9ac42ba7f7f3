"""Python-based backends, as Triton serves them (the vLLM backend's layout): a model whose ``backend``
is none of the server's own runs ``<--backend-directory>/<backend>/model.py`` on the Python backend;
its folder holds only its files (here ``model.json``, read through ``pb_utils.get_model_dir()``),
``auto_complete_config`` fills its inputs and outputs, and its config says ``runtime: "model.py"``.
``--backend-config`` is accepted as Triton accepts it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.server import ServerProcess

#: ``OUTPUT0 = INPUT0 * factor``, ``factor`` from the model's ``model.json``.
SCALER_PY = """
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [2]})
        config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [2]})
        return config

    def initialize(self, args):
        with open(os.path.join(pb_utils.get_model_dir(), "model.json")) as file:
            self.factor = json.load(file)["factor"]
        self.version = args["model_version"]

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data * self.factor)]))
        return responses
"""

IN_THE_SERVER = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }'


def _model(repo: Path, name: str, factors: dict[int, float], config: str = 'backend: "scaler"\n') -> None:
    for version, factor in factors.items():
        (repo / name / str(version)).mkdir(parents=True)
        (repo / name / str(version) / "model.json").write_text(json.dumps({"factor": factor}))
    (repo / name / "config.pbtxt").write_text(config)


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    backends, repo = tmp_path / "backends", tmp_path / "repo"
    (backends / "scaler").mkdir(parents=True)
    (backends / "scaler" / "model.py").write_text(SCALER_PY)
    _model(repo, "double", {1: 2.0, 2: 2.5}, 'backend: "scaler"\nversion_policy: { all { } }\n')
    _model(repo, "triple_in_server", {1: 3.0}, f'backend: "scaler"\n{IN_THE_SERVER}\n')
    _model(repo, "unknown", {1: 1.0}, 'backend: "nowhere"\n')
    _model(repo, "no_runtime", {1: 1.0}, 'backend: "nowhere"\nruntime: "model.py"\n')
    return backends, repo


def _scaled(client: httpclient.InferenceServerClient, name: str, version: str = "") -> list[float]:
    tensor = httpclient.InferInput("INPUT0", [2], "FP32")
    tensor.set_data_from_numpy(np.array([1.0, 4.0], dtype=np.float32))
    output = client.infer(name, [tensor], model_version=version).as_numpy("OUTPUT0")
    assert output is not None
    return [float(value) for value in output]


def test_a_python_based_backend_serves_models_that_hold_only_their_files(layout: tuple[Path, Path]) -> None:
    backends, repo = layout
    args = [f"--backend-directory={backends}", "--backend-config=python,shm-default-byte-size=1048576"]
    with ServerProcess([repo], [*args, "--exit-on-error=false", "--strict-readiness=false"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert _scaled(client, "double", "1") == [2.0, 8.0]
        assert _scaled(client, "double", "2") == [2.5, 10.0]
        assert _scaled(client, "triple_in_server") == [3.0, 12.0]
        config = client.get_model_config("double")
        assert (config["backend"], config["runtime"]) == ("scaler", "model.py")
        assert [tensor["name"] for tensor in config["input"]] == ["INPUT0"]  # (its auto_complete_config)
        index = {entry["name"]: entry for entry in client.get_model_repository_index()}
        assert index["unknown"]["state"] == "UNAVAILABLE"
        assert "unable to find backend library for backend 'nowhere'" in index["unknown"]["reason"]
        assert index["no_runtime"]["reason"] == (
            "unable to find Python backend based backend library 'model.py' for model 'no_runtime', "
            f"searched: '{backends / 'nowhere' / 'model.py'}'"
        )
        with pytest.raises(InferenceServerException, match="unknown"):
            _scaled(client, "unknown")
        client.close()


def test_without_the_backend_directory_such_a_model_does_not_load(layout: tuple[Path, Path], tmp_path: Path) -> None:
    _, repo = layout
    elsewhere = tmp_path / "empty"
    elsewhere.mkdir()
    with ServerProcess([repo], [f"--backend-directory={elsewhere}", "--exit-on-error=false", "--strict-readiness=false"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        index = {entry["name"]: entry for entry in client.get_model_repository_index()}
        assert index["double"]["state"] == "UNAVAILABLE"
        assert "unable to find backend library for backend 'scaler'" in index["double"]["reason"]
        client.close()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (",shm-default-byte-size=1", "No backend specified. --backend-config option format is"),
        ("python,shm-default-byte-size", "--backend-config option format is '<backend name>,<setting>=<value>'"),
        ("python,=1", "--backend-config option format is '<backend name>,<setting>=<value>'"),
    ],
)
def test_a_malformed_backend_config_is_refused_with_tritons_words(tmp_path: Path, option: str, message: str) -> None:
    command = [sys.executable, "-m", "naiad", "serve", f"--model-repository={tmp_path}", f"--backend-config={option}"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 2
    assert message in finished.stderr
