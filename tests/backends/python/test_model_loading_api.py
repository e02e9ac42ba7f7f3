"""The Python backend's model loading API (python_backend 23.07+): ``pb_utils.load_model``,
``unload_model`` and ``is_model_ready`` from a model's ``execute``, as the repository extension's load
and unload (EXPLICIT mode only; Triton's messages otherwise).  NVIDIA's qa request_rescheduling model
reloads its callees this way (``make conformance``).  The calling model runs in a model process and in
the server process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.models import write_model
from tests.support.server import ServerProcess

#: ``ACTION``: 0 is_model_ready("target"), 1 load_model("target"), 2 unload_model("target"),
#: 3 load_model("target") with a config override (a second output name), 4 load_model("missing").
#: Answers 1/0, or the TritonModelException's message as the response's error.
LOADER_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils

OVERRIDE = {OVERRIDE!r}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            action = int(pb_utils.get_input_tensor_by_name(request, "ACTION").as_numpy()[0])
            try:
                if action == 0:
                    value = pb_utils.is_model_ready("target")
                elif action == 1:
                    value = pb_utils.load_model("target") is None
                elif action == 2:
                    value = pb_utils.unload_model(model_name="target") is None
                elif action == 3:
                    value = pb_utils.load_model("target", config=OVERRIDE) is None
                else:
                    value = pb_utils.load_model("missing") is None
            except pb_utils.TritonModelException as error:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(error.message())))
                continue
            out = pb_utils.Tensor("OUTPUT0", np.array([int(value)], np.int32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

TARGET_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""

LOADER_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "ACTION" data_type: TYPE_INT32 dims: [ 1 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }}]
{extra}
"""

TARGET_CONFIG = """
name: "target"
backend: "python"
max_batch_size: 0
input [{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }]
"""

OVERRIDE = json.dumps(
    {
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "IN", "data_type": "TYPE_INT32", "dims": [1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [1]}],
        "parameters": {"overridden": {"string_value": "yes"}},
    }
)
IN_THE_SERVER = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }'
LOADERS = ["loader", "loader_in_server"]


def _repository(tmp_path_factory: pytest.TempPathFactory) -> str:
    repo = tmp_path_factory.mktemp("loading_api")
    model_py = LOADER_PY.replace("{OVERRIDE!r}", repr(OVERRIDE))
    for name, extra in (("loader", ""), ("loader_in_server", IN_THE_SERVER)):
        write_model(repo, name, LOADER_CONFIG.format(name=name, extra=extra), model_py)
    write_model(repo, "target", TARGET_CONFIG, TARGET_PY)
    return str(repo)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _repository(tmp_path_factory)


@pytest.fixture(scope="module")
def explicit(repository: str) -> Iterator[ServerProcess]:
    args = ["--model-control-mode=explicit", "--load-model=loader", "--load-model=loader_in_server"]
    with ServerProcess([repository], args) as served:
        yield served


def _call(server: ServerProcess, loader: str, action: int) -> int:
    tensor = httpclient.InferInput("ACTION", [1], "INT32")
    tensor.set_data_from_numpy(np.array([action], np.int32))
    with httpclient.InferenceServerClient(server.http_url) as client:
        return int(client.infer(loader, [tensor]).as_numpy("OUTPUT0")[0])


def _target_config(server: ServerProcess) -> dict[str, object]:
    with httpclient.InferenceServerClient(server.http_url) as client:
        config: dict[str, object] = client.get_model_config("target")
        return config


@pytest.mark.parametrize("loader", LOADERS)
def test_a_model_loads_checks_and_unloads_another(explicit: ServerProcess, loader: str) -> None:
    assert _call(explicit, loader, 0) == 0
    assert _call(explicit, loader, 1) == 1
    assert _call(explicit, loader, 0) == 1
    with httpclient.InferenceServerClient(explicit.http_url) as client:
        assert client.is_model_ready("target")
        tensor = httpclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([7], np.int32))
        assert int(client.infer("target", [tensor]).as_numpy("OUT")[0]) == 7
    assert _call(explicit, loader, 3) == 1  # reloaded with the configuration it was given
    parameters = _target_config(explicit)["parameters"]
    assert isinstance(parameters, dict) and parameters["overridden"] == {"string_value": "yes"}
    assert _call(explicit, loader, 2) == 1
    assert _call(explicit, loader, 0) == 0
    with httpclient.InferenceServerClient(explicit.http_url) as client:
        assert not client.is_model_ready("target")


@pytest.mark.parametrize("loader", LOADERS)
def test_a_failed_load_raises_the_servers_message_in_the_model(explicit: ServerProcess, loader: str) -> None:
    with pytest.raises(InferenceServerException) as failed:
        _call(explicit, loader, 4)
    assert failed.value.message() == "failed to load 'missing', failed to poll from model repository"


def test_the_api_is_refused_unless_the_server_is_in_explicit_mode(repository: str) -> None:
    with ServerProcess([repository]) as served:
        with pytest.raises(InferenceServerException) as failed:
            _call(served, "loader", 1)
        assert failed.value.message() == "explicit model load / unload is not allowed if polling is enabled"
        assert _call(served, "loader", 0) == 1  # is_model_ready works in any mode
