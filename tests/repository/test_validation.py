"""Triton's checks of a whole model configuration, in its words (``ValidateModelConfig``,
``ValidateIOShape``, ``ValidateInstanceGroup``), each compared with Triton 2.51 on the same config
(NVIDIA's ``qa/L0_model_config/noautofill_platform``: 58 of 58 there).  They run when the model is
polled, before its versions are looked at, so a model without a version folder still hears what
is wrong with its config."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from google.protobuf import text_format
from naiad.core.errors import InvalidArgumentError
from naiad.repository.config import normalize, resolve_backend, version_problem
from tritonclient.grpc import model_config_pb2 as mc

from tests.support.models import write_model
from tests.support.server import ServerProcess

BASE = """
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [{ name: "input" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "output" data_type: TYPE_FP32 dims: [ 4 ] }]
"""

CONTROLS = """
sequence_batching {
  control_input [
    { name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }] },
    %s
  ]
}
"""


def _refusal(text: str, gpu_count: int = 0) -> str:
    """Why the config is refused when polled, or else when its versions load (instance groups)."""
    config = text_format.Parse(text, mc.ModelConfig())
    try:
        normalize(config, "m", gpu_count)
    except InvalidArgumentError as refused:
        return str(refused)
    problem = version_problem(config, gpu_count, check_io=True)
    assert problem.startswith("Invalid argument: "), "refused neither at poll nor at load"
    return problem.removeprefix("Invalid argument: ")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("max_batch_size: -1", "'max_batch_size' must be non-negative value for m"),
        ("dynamic_batching { preferred_batch_size: [ 16 ] }",
         "dynamic batching preferred size must be <= max batch size for m"),
        ("dynamic_batching { preferred_batch_size: [ 0 ] }", "dynamic batching preferred size must be positive for m"),
        ("dynamic_batching { priority_levels: 3 default_priority_level: 4 }",
         "default priority level must be in range [1, 3] for m"),
        ("dynamic_batching { priority_levels: 3 default_priority_level: 1 priority_queue_policy { key: 4 value {} } }",
         "priority queue policy must have priority level in range [1, 3] for m"),
        ("dynamic_batching { preserve_ordering: true priority_levels: 2 default_priority_level: 1 }",
         "Only one priority level is allowed when 'preserve_ordering' is true for m"),
        ("dynamic_batching { preserve_ordering: true default_queue_policy { timeout_action: DELAY "
         "default_timeout_microseconds: 10 } }",
         "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for m"),
        (CONTROLS % '{ name: "START2" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }] }',
         "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for m"),
        (CONTROLS % '{ name: "START" control [{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }] }',
         "sequence batching control tensor 'START' is specified for multiple control kinds for m"),
        (CONTROLS % '{ name: "READY" control [{ kind: CONTROL_SEQUENCE_READY }] }',
         "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' "
         "for CONTROL_SEQUENCE_READY for m"),
        (CONTROLS % '{ name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 }] }',
         "unexpected data type for control CONTROL_SEQUENCE_CORRID for m. Allowed data types are "
         "TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"),
        ('ensemble_scheduling { step [{ model_name: "x" model_version: -1 }] } '
         "instance_group [{ kind: KIND_GPU gpus: [ 42 ] }]",
         "ensemble scheduling cannot be set for model 'm' whose platform is not ensemble"),
        ("instance_group [{ kind: KIND_CPU gpus: [ 0 ] }]",
         "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs"),
        ("instance_group [{ kind: KIND_GPU gpus: [ 42 ] }]",
         "instance group m_0 of model m specifies invalid or unsupported gpu id 42. GPUs with at least the "
         "minimum required CUDA compute compatibility of 6.000000 are: "),
        ("instance_group [{ kind: KIND_GPU }]", "instance group m_0 of model m has kind KIND_GPU but no GPUs are available"),
        ("instance_group [{ kind: KIND_MODEL gpus: [ 0 ] }]",
         "instance group m_0 of model m has kind KIND_MODEL but specifies one or more GPUs"),
        # (Triton's sentence has no space before "specifies")
        ('instance_group [{ kind: KIND_CPU profile: [ "0" ] }]',
         "instance group m_0 of model m and platform onnxruntime_onnxspecifies profile field which is only "
         "supported for TensorRT models"),
    ],
)  # fmt: skip
def test_sections_are_refused_in_tritons_words(extra: str, message: str) -> None:
    text = BASE.replace("max_batch_size: 8", "") if extra.startswith("max_batch_size") else BASE
    assert _refusal(text + extra) == message


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        ('{ name: "input" dims: [ 4 ] }', "model input 'input' must specify 'data_type' for m"),
        ('{ name: "input" data_type: TYPE_FP32 dims: [ 0 ] }',
         "model input 'input' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m"),
        ('{ name: "input" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 0 ] } }',
         "model input 'input' reshape dimensions must be integer >= 1, or -1 to indicate a variable-size "
         "dimension for m"),
        ('{ name: "input" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 3 ] } }',
         "model input 'input' has different size for dims and reshape for m"),
        ('{ name: "input" data_type: TYPE_FP32 dims: [ 2, -1, 3 ] reshape { shape: [ -1, 2, -1, 3 ] } }',
         "model input 'input' has different number of variable-size dimensions for dims and reshape for m"),
        ('{ name: "input" data_type: TYPE_FP32 dims: [ 2, -1, 3 ] reshape { shape: [ 3, -1, 2 ] } }',
         "model input 'input' has different size for dims and reshape for m"),
    ],
)  # fmt: skip
def test_tensors_are_refused_in_tritons_words(tensor: str, message: str) -> None:
    text = BASE.replace('input [{ name: "input" data_type: TYPE_FP32 dims: [ 4 ] }]', f"input [{tensor}]")
    assert _refusal(text) == message


@pytest.mark.parametrize(
    ("platform", "tensor", "message"),
    [
        ("onnxruntime_onnx", '{ name: "input" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 4 ] }',
         "model input NHWC/NCHW require 3 dims for m"),
        ("onnxruntime_onnx", '{ name: "input" data_type: TYPE_INT32 dims: [ 4 ] is_shape_tensor: true }',
         "shape tensors are only supported for TensorRT platform for m"),
        ("pytorch_libtorch", '{ name: "input" data_type: TYPE_FP32 dims: [ 4 ] is_non_linear_format_io: true }',
         "Non-linear IO format is only supported for the TensorRT platform for m"),
        ("tensorrt_plan", '{ name: "input" data_type: TYPE_FP32 dims: [ 4 ] is_non_linear_format_io: true }',
         "Non-linear IO format input requires 3 dims for m"),
    ],
)  # fmt: skip
def test_what_only_some_platforms_take_is_refused_in_tritons_words(platform: str, tensor: str, message: str) -> None:
    text = BASE.replace('input [{ name: "input" data_type: TYPE_FP32 dims: [ 4 ] }]', f"input [{tensor}]")
    assert _refusal(text.replace("onnxruntime_onnx", platform)) == message


def test_tensorrt_profiles_are_integers_of_0_or_more() -> None:
    text = BASE.replace("onnxruntime_onnx", "tensorrt_plan")
    group = 'instance_group [{ kind: KIND_CPU profile: [ "%s" ] }]'
    assert _refusal(text + group % "-1") == (
        "instance group m_0 of model m and platform tensorrt_plan specifies invalid profile -1. The field "
        "should contain the string representation of a non-negative integer."
    )
    assert _refusal(text + group % "first") == "unable to parse 'first': stoi"
    config = text_format.Parse(text + group % "1", mc.ModelConfig())
    normalize(config, "m")
    assert list(config.instance_group[0].profile) == ["1"]


@pytest.mark.parametrize(
    ("tensor", "batching"),
    [
        ('{ name: "input" data_type: TYPE_FP32 dims: [ 2, -1, 3 ] reshape { shape: [ 2, -1, 1, 3 ] } }', 8),
        ('{ name: "input" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } }', 8),  # (a batch of scalars)
        ('{ name: "input" data_type: TYPE_FP32 dims: [ 2, 4, -1, 6 ] reshape { shape: [ 8, -1, 1, 6 ] } }', 0),
    ],
)  # fmt: skip
def test_reshapes_triton_takes_are_taken(tensor: str, batching: int) -> None:
    text = BASE.replace('input [{ name: "input" data_type: TYPE_FP32 dims: [ 4 ] }]', f"input [{tensor}]")
    config = text_format.Parse(text.replace("max_batch_size: 8", f"max_batch_size: {batching}"), mc.ModelConfig())
    normalize(config, "m")
    assert config.name == "m"  # (normalized, not refused)


def test_a_model_without_versions_is_told_what_is_wrong_with_its_config(tmp_path: Path) -> None:
    """Triton checks the config when it polls the model: the reshape error, not "at least one
    version must be available", for a model with no version folder."""
    model = write_model(tmp_path, "bad", BASE.replace('"m"', '"bad"') + """
        sequence_batching { control_input [
          { name: "A" control [{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }] },
          { name: "B" control [{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }] } ] }
        """)  # fmt: skip
    (model / "1").rmdir()
    with ServerProcess([tmp_path], ["--model-control-mode=explicit"]) as server:
        request = urllib.request.Request(f"http://{server.http_url}/v2/repository/models/bad/load", data=b"")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request)
        # Triton 2.51's answer to a model whose config does not poll (checked), the reason in its log
        assert refused.value.code == 500
        assert json.loads(refused.value.read()) == {
            "error": "failed to load 'bad', failed to poll from model repository"
        }
        assert "sequence batching specifies multiple CONTROL_SEQUENCE_END tensors for bad" in server.log()
        assert "at least one version must be available" not in server.log()


def test_a_config_naming_no_backend_takes_it_from_the_model_name() -> None:
    """Triton's last resort, and its words when the name has no ``.<backend>``."""
    config = mc.ModelConfig(name="m")
    with pytest.raises(InvalidArgumentError) as refused:
        resolve_backend(config, Path("/nowhere"), [])
    assert str(refused.value) == (
        "Invalid model name: Could not determine backend for model 'm' with no backend in model "
        "configuration. Expected model name of the form 'model.<backend_name>'."
    )
    config = mc.ModelConfig(name="ranker.custom_rank")
    resolve_backend(config, Path("/nowhere"), [])
    assert (config.backend, config.default_model_filename) == ("custom_rank", "model.custom_rank")


ENSEMBLE = """
name: "%s"
platform: "ensemble"
input [{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [ 4 ] }]
ensemble_scheduling { step [{ model_name: "%s" model_version: -1
  input_map { key: "x" value: "x" } output_map { key: "y" value: "y" } }] }
"""


def test_ensembles_that_need_each_other_fail_to_load_instead_of_waiting_for_each_other(tmp_path: Path) -> None:
    """Loaded side by side at start, each waited for the other's load for ever (the server never
    became ready); as in Triton both fail with its circular dependency message, and a model beside
    them serves (qa/L0_model_config's ``circular_dependency``)."""
    write_model(tmp_path, "first", ENSEMBLE % ("first", "second"))
    write_model(tmp_path, "second", ENSEMBLE % ("second", "first"))
    write_model(tmp_path, "selfish", ENSEMBLE % ("selfish", "selfish"))
    args = ["--exit-on-error=false", "--strict-readiness=false"]
    with ServerProcess([tmp_path], args) as server:
        request = urllib.request.Request(f"http://{server.http_url}/v2/repository/index", data=b"{}")
        with urllib.request.urlopen(request) as answer:
            index = {row["name"]: row for row in json.loads(answer.read())}
        log = server.log()
    # listed, none serving (Triton 2.51 lists such a model with no state either)
    assert sorted(index) == ["first", "second", "selfish"]
    assert all(row.get("state", "UNAVAILABLE") == "UNAVAILABLE" for row in index.values())
    assert "circular dependency between ensembles: first -> ... -> second -> first" in log or (
        "circular dependency between ensembles: second -> ... -> first -> second" in log
    )
    assert "circular dependency between ensembles: selfish -> ... -> selfish -> selfish" in log


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("", "must specify 'step' for ensemble 'e'"),
        ("optimization { }", "optimization should not be specified for ensemble 'e'"),
        ('backend: "python"', "Ensemble model 'e' must have platform type 'ensemble' and empty backend type"),
    ],
)
def test_an_ensemble_without_versions_is_told_what_is_wrong_with_its_graph(extra: str, message: str) -> None:
    text = (ENSEMBLE % ("e", "m")).split("ensemble_scheduling")[0] + "ensemble_scheduling { }\n" + extra
    assert _refusal(text) == message
