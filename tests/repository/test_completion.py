"""What Triton writes into a config it completes, and how it finds a config's backend, in its words.

``/v2/models/<m>/config`` must equal Triton's field for field (NVIDIA's ``qa/L0_model_config``
``compare_status.py`` compares them: 23 of 23 runnable cases), so the defaults Triton core fills
are filled here too; the backend and runtime checks are Triton 2.51's (checked side by side with
its CPU build: the same lines in both logs).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from google.protobuf import text_format
from naiad.core.errors import InvalidArgumentError
from naiad.repository.config import normalize, resolve_backend
from tritonclient.grpc import model_config_pb2 as mc

from tests.support.models import write_model
from tests.support.server import ServerProcess

TENSORS = """
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
"""


def _completed(text: str) -> mc.ModelConfig:
    config = text_format.Parse(text + TENSORS, mc.ModelConfig())
    resolve_backend(config, Path("/nowhere"), [])
    normalize(config, "m")
    return config


def test_a_batching_model_prefers_its_max_batch_size_as_triton_writes_it() -> None:
    config = _completed('name: "m" backend: "python" max_batch_size: 8 dynamic_batching { }')
    assert list(config.dynamic_batching.preferred_batch_size) == [8]
    given = _completed(
        'name: "m" backend: "python" max_batch_size: 8 dynamic_batching { preferred_batch_size: 2 }'
    )
    assert list(given.dynamic_batching.preferred_batch_size) == [2]
    unbatched = _completed('name: "m" backend: "python" dynamic_batching { }')
    assert list(unbatched.dynamic_batching.preferred_batch_size) == []


def test_a_sequence_model_gets_tritons_idle_timeout_and_oldest_preferred_size() -> None:
    config = _completed('name: "m" backend: "python" max_batch_size: 4 sequence_batching { oldest { } }')
    assert config.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    assert list(config.sequence_batching.oldest.preferred_batch_size) == [4]
    kept = _completed('name: "m" backend: "python" sequence_batching { max_sequence_idle_microseconds: 5 }')
    assert kept.sequence_batching.max_sequence_idle_microseconds == 5


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ('name: "m" platform: "onnxruntime_onnx"', [2]),  # Triton's two CPU instances for ONNX Runtime
        ('name: "m" backend: "onnxruntime" instance_group [{ kind: KIND_CPU }, { count: 3 }]', [2, 3]),
        ('name: "m" backend: "python"', [1]),
        ('name: "m" platform: "pytorch_libtorch" instance_group [{ kind: KIND_CPU }]', [1]),
    ],
)
def test_instance_counts_default_as_in_triton(text: str, counts: list[int]) -> None:
    assert [group.count for group in _completed(text).instance_group] == counts


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name: "m" platform: "onnxruntim" default_model_filename: "model.onnx"',
         "unexpected 'platform' and 'backend' pair, got:onnxruntim, onnxruntime"),
        ('name: "m" platform: "pytorch_libtorch" backend: "onnxruntime"',
         "unexpected 'platform' and 'backend' pair, got:pytorch_libtorch, onnxruntime"),
        ('name: "m" platform: "onnxruntim"', "unexpected platform type 'onnxruntim' for m"),
        ('name: "m" default_model_filename: "weights.bin"', "unexpected platform type '' for m"),
    ],
)  # fmt: skip
def test_backends_and_platforms_that_disagree_are_refused_in_tritons_words(text: str, message: str) -> None:
    config = text_format.Parse(text, mc.ModelConfig())
    with pytest.raises(InvalidArgumentError) as refused:
        resolve_backend(config, Path("/nowhere"), [])
    assert str(refused.value) == message


def test_a_python_model_may_name_any_platform_and_a_model_file_names_its_backend() -> None:
    config = text_format.Parse('name: "m" backend: "python" platform: "mine"', mc.ModelConfig())
    resolve_backend(config, Path("/nowhere"), [])
    assert (config.backend, config.platform) == ("python", "mine")
    config = text_format.Parse('name: "m" default_model_filename: "model.pt"', mc.ModelConfig())
    resolve_backend(config, Path("/nowhere"), [])
    assert (config.backend, config.platform) == ("pytorch", "pytorch_libtorch")


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("malformed", "model metrics: metric control must specify 'metric_identifier'"),
        ("", "metric identifier must specify non-empty 'family'"),
        ("no options", "metric control must specify 'histogram_options'"),
        ("no buckets", "histogram options must specify non-empty 'buckets'"),
    ],
)
def test_model_metrics_sections_are_checked_in_tritons_words(kind: str, message: str) -> None:
    control = {
        "malformed": "histogram_options { buckets: [ 1 ] }",
        "": 'metric_identifier { family: "" } histogram_options { buckets: [ 1 ] }',
        "no options": 'metric_identifier { family: "nv_inference_first_response_histogram_ms" }',
        "no buckets": 'metric_identifier { family: "f" } histogram_options { }',
    }[kind]
    text = f'name: "m" backend: "python" model_metrics {{ metric_control [{{ {control} }}] }}'
    with pytest.raises(InvalidArgumentError) as refused:
        _completed(text)
    assert str(refused.value) == message.removeprefix("model metrics: ")


def _load_error(server: ServerProcess, name: str) -> tuple[int, str]:
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/models/{name}/load", data=b"")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request)
    return refused.value.code, json.loads(refused.value.read())["error"]


def test_a_runtime_library_is_looked_for_where_triton_looks_and_may_not_escape(tmp_path: Path) -> None:
    model_py = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    runtime = 'name: "{0}" backend: "python" runtime: "{1}"' + TENSORS.replace("{", "{{").replace("}", "}}")
    repo, backends = tmp_path / "repo", tmp_path / "backends"
    write_model(repo, "missing", runtime.format("missing", "__nowhere__"), model_py)
    escaping = write_model(repo, "escaping", runtime.format("escaping", "../elsewhere/lib.so"), model_py)
    (escaping / "elsewhere").mkdir()
    (escaping / "elsewhere" / "lib.so").touch()
    write_model(repo, "own", runtime.format("own", "libtriton_python.so"), model_py)
    backends.mkdir()
    with ServerProcess(
        [repo], ["--model-control-mode=explicit", f"--backend-directory={backends}"]
    ) as server:
        code, error = _load_error(server, "missing")
        assert code == 400
        assert error == (
            "load failed for model 'missing': version 1 is at UNAVAILABLE state: Invalid argument: unable to "
            f"find backend library '__nowhere__' for model 'missing', searched: '{repo}/missing/1' "
            f"'{repo}/missing' '{backends}/python' ;\n"
        )
        code, error = _load_error(server, "escaping")
        assert code == 400
        assert (
            f"backend library name '../elsewhere/lib.so' escapes backend directory '{escaping}/1', for model "
            "'escaping', check model config runtime field" in error
        )
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            client.load_model("own")  # the backend's own library: this server has it
            assert client.is_model_ready("own")
            assert client.get_model_config("own").config.runtime == "libtriton_python.so"
        log = server.log()
    assert "Poll failed" not in log  # (a version's failure, as in Triton, not the poll's)


def test_a_config_that_does_not_poll_is_logged_in_tritons_words(tmp_path: Path) -> None:
    write_model(tmp_path, "odd", 'name: "odd" platform: "onnxruntim"' + TENSORS)
    with ServerProcess([tmp_path], ["--model-control-mode=explicit"]) as server:
        assert _load_error(server, "odd") == (
            500,
            "failed to load 'odd', failed to poll from model repository",
        )
        log = server.log()
    assert "Poll failed for model directory 'odd': unexpected platform type 'onnxruntim' for odd" in log


def test_an_unknown_metric_family_is_ignored_with_tritons_warning(tmp_path: Path) -> None:
    metrics = (
        'model_metrics { metric_control [{ metric_identifier { family: "nv_inference_request_success" } '
        "histogram_options { buckets: [ 1, 2 ] } }] }"
    )
    model_py = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    write_model(tmp_path, "m", 'name: "m" backend: "python"' + TENSORS + metrics, model_py)
    with ServerProcess([tmp_path], ["--metrics-config", "histogram_latencies=true"]) as server:
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            assert client.is_model_ready("m")
        log = server.log()
    assert (
        "Metric family 'nv_inference_request_success' in 'metric_identifier' is not a customizable metric "
        "in Triton core." in log
    )


def test_io_and_instance_group_faults_fail_the_versions_and_the_answer_says_why(tmp_path: Path) -> None:
    """As Triton checks them when it creates the model (after auto-complete): the load API's 400 and
    the index carry the reason; with auto-complete off it checks inputs and outputs at poll (500)."""
    model_py = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    image = 'name: "image" backend: "python" input [{ name: "I" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 4 ] }]'
    write_model(tmp_path, "image", image, model_py)
    profiled = (
        'name: "profiled" backend: "python"' + TENSORS + 'instance_group [{ kind: KIND_CPU profile: "0" }]'
    )
    write_model(tmp_path, "profiled", profiled, model_py)
    reason = "Invalid argument: model input NHWC/NCHW require 3 dims for image"
    with ServerProcess([tmp_path], ["--model-control-mode=explicit"]) as server:
        assert _load_error(server, "image") == (
            400,
            f"load failed for model 'image': version 1 is at UNAVAILABLE state: {reason};\n",
        )
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            index = client.get_model_repository_index().models
        assert [(m.name, m.state, m.reason) for m in index if m.name == "image"] == [
            ("image", "UNAVAILABLE", reason)
        ]
    flags = ["--model-control-mode=explicit", "--disable-auto-complete-config"]
    with ServerProcess([tmp_path], flags) as server:
        assert _load_error(server, "image") == (
            500,
            "failed to load 'image', failed to poll from model repository",
        )
        code, error = _load_error(server, "profiled")  # (instance groups: when the versions load, always)
        log = server.log()
    assert "Poll failed for model directory 'image': model input NHWC/NCHW require 3 dims for image" in log
    assert code == 400
    assert "and platform specifies profile field which is only supported for TensorRT models" in error
