"""Loading instances: config/model mismatches, reshape, session options, providers, model files."""

from __future__ import annotations

import shutil
import weakref
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from naiad.backends.onnxruntime import session
from naiad.core.errors import InternalError, InvalidArgumentError, UnavailableError
from naiad.core.request import InferResponse
from naiad.repository.config import parse_text
from onnx import TensorProto, helper

from tests.backends.onnxruntime.models import LoadInstance, load_config, request, tensor_info, write_model
from tests.support.backends import get_backend

SIMPLE_IO = """
max_batch_size: 8
input [
  {{ name: "{in0}" data_type: {type} dims: [ 16 ] }},
  {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ {dim} ] }}
]
output [
  {{ name: "{out0}" data_type: TYPE_INT32 dims: [ 16 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }}
]
"""


def simple_with(tmp_path: Path, examples: Path, extra: str = "", **fields: str) -> Path:
    """The example ``simple`` model under a config with some fields changed."""
    values = {"in0": "INPUT0", "out0": "OUTPUT0", "type": "TYPE_INT32", "dim": "16", **fields}
    model_dir = tmp_path / "simple"
    shutil.copytree(examples / "simple" / "1", model_dir / "1")
    (model_dir / "config.pbtxt").write_text(SIMPLE_IO.format(**values) + extra)
    return model_dir


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"in0": "NOPE"}, "unexpected inference input 'NOPE', allowed inputs are: INPUT0, INPUT1"),
        ({"out0": "GONE"}, "unexpected inference output 'GONE', allowed outputs are: OUTPUT0, OUTPUT1"),
        (
            {"type": "TYPE_FP32"},
            "unable to load model 'simple', configuration expects datatype TYPE_FP32 for input "
            "'INPUT0', model provides TYPE_INT32",
        ),
        (
            {"dim": "15"},
            "model 'simple', tensor 'INPUT1': the model expects 2 dimensions (shape [-1,16]) but the model "
            "configuration specifies 2 dimensions (an initial batch dimension because max_batch_size > 0 "
            "followed by the explicit tensor shape, making complete shape [-1,15])",
        ),
    ],
)
def test_config_that_disagrees_with_the_model_fails_to_load(
    tmp_path: Path, examples: Path, instances: LoadInstance, fields: dict[str, str], message: str
) -> None:
    model_dir = simple_with(tmp_path, examples, **fields)
    with pytest.raises(InvalidArgumentError) as error:
        instances(model_dir)
    assert error.value.message == message


def test_input_count_must_match(tmp_path: Path, instances: LoadInstance) -> None:
    model_dir = write_model(
        tmp_path,
        "two_in",
        [helper.make_node("Add", ["a", "b"], ["c"])],
        [tensor_info("a", TensorProto.FLOAT, [2]), tensor_info("b", TensorProto.FLOAT, [2])],
        [tensor_info("c", TensorProto.FLOAT, [2])],
        """
        input [ { name: "a" data_type: TYPE_FP32 dims: [ 2 ] } ]
        output [ { name: "c" data_type: TYPE_FP32 dims: [ 2 ] } ]
        """,
    )
    with pytest.raises(InvalidArgumentError, match="configuration expects 1 inputs, model provides 2"):
        instances(model_dir)


def test_reshape_feeds_the_model_its_shape_and_returns_the_configured_one(
    tmp_path: Path, instances: LoadInstance
) -> None:
    model_dir = write_model(
        tmp_path,
        "square",
        [helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1])],
        [tensor_info("x", TensorProto.FLOAT, ["n", 4, 4])],
        [tensor_info("y", TensorProto.FLOAT, ["n", 4, 4])],
        """
        max_batch_size: 4
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] reshape { shape: [ 4, 4 ] } } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 16 ] reshape { shape: [ 4, 4 ] } } ]
        """,
    )
    instance = instances(model_dir)
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    [result] = instance.execute([request("square", {"x": x})])
    assert isinstance(result, InferResponse)
    expected = x.reshape(2, 4, 4).transpose(0, 2, 1).reshape(2, 16)
    np.testing.assert_array_equal(result.outputs[0].data, expected)


def test_reshape_without_batching_returns_the_configured_shape(
    tmp_path: Path, instances: LoadInstance
) -> None:
    """A model that does not batch runs each request alone, its outputs reshaped back all the same."""
    model_dir = write_model(
        tmp_path,
        "square",
        [helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])],
        [tensor_info("x", TensorProto.FLOAT, [4, 4])],
        [tensor_info("y", TensorProto.FLOAT, [4, 4])],
        """
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] reshape { shape: [ 4, 4 ] } } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 16 ] reshape { shape: [ 4, 4 ] } } ]
        """,
    )
    instance = instances(model_dir)
    x = np.arange(16, dtype=np.float32)
    results = instance.execute([request("square", {"x": x}), request("square", {"x": x + 16})])
    for result, given in zip(results, (x, x + 16), strict=True):
        assert isinstance(result, InferResponse)
        assert result.outputs[0].data.shape == (16,)
        np.testing.assert_array_equal(result.outputs[0].data, given.reshape(4, 4).T.reshape(16))


def test_a_batching_model_answering_another_batch_size_fails_that_request(
    tmp_path: Path, instances: LoadInstance
) -> None:
    """A single request's outputs are still checked against its batch size (here the model doubles it)."""
    model_dir = write_model(
        tmp_path,
        "doubled",
        [helper.make_node("Concat", ["x", "x"], ["y"], axis=0)],
        [tensor_info("x", TensorProto.FLOAT, ["n", 2])],
        [tensor_info("y", TensorProto.FLOAT, ["m", 2])],
        """
        max_batch_size: 4
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 2 ] } ]
        """,
    )
    instance = instances(model_dir)
    [result] = instance.execute([request("doubled", {"x": np.ones((3, 2), dtype=np.float32)})])
    assert isinstance(result, InternalError)
    assert result.message == (
        "model 'doubled': output of shape [6, 2] cannot be split into batches of [3]: expected 3 rows in dimension 0"
    )


def test_session_options_from_triton_parameters(
    tmp_path: Path, examples: Path, instances: LoadInstance
) -> None:
    extra = """
    parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
    parameters { key: "inter_op_thread_count" value: { string_value: "1" } }
    parameters { key: "execution_mode" value: { string_value: "1" } }
    parameters { key: "enable_mem_arena" value: { string_value: "True" } }
    parameters { key: "enable_mem_pattern" value: { string_value: "on" } }
    parameters { key: "memory.enable_memory_arena_shrinkage" value: { string_value: "cpu:0" } }
    optimization { graph { level: 2 } }
    """
    model_dir = simple_with(tmp_path, examples, extra)
    options = session.session_options(load_config(model_dir))
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert options.enable_cpu_mem_arena and options.enable_mem_pattern
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    a = np.ones((1, 16), np.int32)
    [result] = instances(model_dir).execute([request("simple", {"INPUT0": a, "INPUT1": a})])
    assert isinstance(result, InferResponse)


def test_default_session_options_are_tritons(examples: Path) -> None:
    options = session.session_options(load_config(examples / "simple"))
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert options.intra_op_num_threads == 0  # ORT picks, as in Triton


@pytest.mark.parametrize(
    ("parameter", "value", "message"),
    [
        ("execution_mode", "2", "execution_mode are 0 or 1 but got 2"),
        ("intra_op_thread_count", "many", "failed to convert 'many' to integral number"),
        ("enable_mem_arena", "maybe", "failed to convert 'maybe' to boolean"),
    ],
)
def test_bad_parameters_fail_to_load(
    tmp_path: Path, examples: Path, instances: LoadInstance, parameter: str, value: str, message: str
) -> None:
    extra = f'parameters {{ key: "{parameter}" value: {{ string_value: "{value}" }} }}'
    with pytest.raises(InvalidArgumentError, match=message):
        instances(simple_with(tmp_path, examples, extra))


def test_unknown_accelerator_fails_to_load(tmp_path: Path, examples: Path, instances: LoadInstance) -> None:
    extra = 'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "warp" } ] } }'
    with pytest.raises(InvalidArgumentError, match="unknown Execution Accelerator 'warp' is requested"):
        instances(simple_with(tmp_path, examples, extra))


@pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(), reason="this onnxruntime has CUDA"
)
def test_gpu_instance_without_cuda_is_unavailable(examples: Path, instances: LoadInstance) -> None:
    with pytest.raises(UnavailableError, match=r"no CUDAExecutionProvider.*onnxruntime-gpu"):
        instances(examples / "simple", kind="GPU")


@pytest.mark.gpu
@pytest.mark.skipif(
    "CUDAExecutionProvider" not in ort.get_available_providers(), reason="this onnxruntime has no CUDA"
)
def test_gpu_instance_runs_on_cuda(examples: Path, instances: LoadInstance) -> None:
    instance = instances(examples / "simple", kind="GPU")
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    [result] = instance.execute([request("simple", {"INPUT0": a, "INPUT1": a})])
    assert isinstance(result, InferResponse)
    np.testing.assert_array_equal(result.outputs[0].data, 2 * a)


def test_model_directory_holding_model_onnx(tmp_path: Path, examples: Path, instances: LoadInstance) -> None:
    model_dir = tmp_path / "simple"
    (model_dir / "1" / "model.onnx").mkdir(parents=True)
    shutil.copy(examples / "simple" / "1" / "model.onnx", model_dir / "1" / "model.onnx" / "model.onnx")
    shutil.copy(examples / "simple" / "config.pbtxt", model_dir / "config.pbtxt")
    a = np.ones((1, 16), np.int32)
    [result] = instances(model_dir).execute([request("simple", {"INPUT0": a, "INPUT1": a})])
    assert isinstance(result, InferResponse)


def test_corrupt_model_file_fails_to_load(tmp_path: Path, examples: Path, instances: LoadInstance) -> None:
    model_dir = simple_with(tmp_path, examples)
    (model_dir / "1" / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(InternalError, match="unable to load model 'simple'"):
        instances(model_dir)


def test_configless_model_without_its_file_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "empty" / "1").mkdir(parents=True)
    config = parse_text('backend: "onnxruntime"')
    with pytest.raises(UnavailableError, match=r"unable to find .*model\.onnx' for model 'empty'"):
        get_backend("onnxruntime").auto_complete(config, tmp_path / "empty", tmp_path / "empty" / "1")


@pytest.mark.parametrize("asked", [None, ["z", "a"], ["a", "z"], ["z"]])
def test_responses_carry_outputs_by_name_whatever_order_the_config_or_request_gives(
    tmp_path: Path, instances: LoadInstance, asked: list[str] | None
) -> None:
    """As Triton's ONNX Runtime backend answers: it keeps a model's outputs in a ``std::map``, so a
    response lists them by name, not in the graph's, the config's or the request's order."""
    model_dir = write_model(
        tmp_path,
        "two_heads",
        [helper.make_node("Identity", ["x"], ["z"]), helper.make_node("Neg", ["x"], ["a"])],
        [tensor_info("x", TensorProto.FLOAT, [2])],
        [tensor_info("z", TensorProto.FLOAT, [2]), tensor_info("a", TensorProto.FLOAT, [2])],
        """
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]
        output [ { name: "z" data_type: TYPE_FP32 dims: [ 2 ] }, { name: "a" data_type: TYPE_FP32 dims: [ 2 ] } ]
        """,
    )
    x = np.array([1.5, -2.0], dtype=np.float32)
    [result] = instances(model_dir).execute([request("two_heads", {"x": x}, asked)])
    assert isinstance(result, InferResponse)
    names = [tensor.name for tensor in result.outputs]
    assert names == sorted(asked or ["z", "a"])
    values = {tensor.name: tensor.data for tensor in result.outputs}
    np.testing.assert_array_equal(values["z"], x)
    if "a" in names:
        np.testing.assert_array_equal(values["a"], -x)


def test_closing_an_instance_frees_its_session_at_once(examples: Path, instances: LoadInstance) -> None:
    """Calls go straight to ORT's own session object; closing drops every hold on it, not at GC."""
    instance = instances(examples / "simple")
    a = np.zeros((1, 16), dtype=np.int32)
    [result] = instance.execute([request("simple", {"INPUT0": a, "INPUT1": a})])
    assert isinstance(result, InferResponse)
    held = weakref.ref(instance._model._sess)  # type: ignore[attr-defined]
    instance.close()
    assert held() is None
    [closed] = instance.execute([request("simple", {"INPUT0": a, "INPUT1": a})])
    assert isinstance(closed, InternalError)
    assert closed.message == "model 'simple' instance is closed"
