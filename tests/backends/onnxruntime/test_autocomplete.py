"""Auto-complete: a model folder with no (or a partial) config.pbtxt becomes a working model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from naiad.core.errors import InvalidArgumentError
from naiad.core.request import InferResponse
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

from tests.backends.onnxruntime.models import (
    LoadInstance,
    build_examples,
    load_config,
    request,
    tensor_info,
    write_model,
)


def fixed_identity(root: Path, config: str | None = None) -> Path:
    """``x`` INT64 ``[2, 3]`` -> ``y``: no variable dim 0, so it cannot batch."""
    return write_model(
        root,
        "fixed",
        [helper.make_node("Identity", ["x"], ["y"])],
        [tensor_info("x", TensorProto.INT64, [2, 3])],
        [tensor_info("y", TensorProto.INT64, [2, 3])],
        config,
    )


def doubler(root: Path, shape: list[int | str], config: str | None = None) -> Path:
    """``y = 2 x`` in FP32 for any ``shape``; ``["n"]`` batches, ``[]`` is a scalar."""
    return write_model(
        root,
        "doubler",
        [helper.make_node("Add", ["x", "x"], ["y"])],
        [tensor_info("x", TensorProto.FLOAT, shape)],
        [tensor_info("y", TensorProto.FLOAT, shape)],
        config,
    )


def test_configless_dynamic_batch_model(tmp_path: Path, instances: LoadInstance) -> None:
    model_dir = tmp_path / "mlp"
    build_examples().build_mlp(model_dir / "1" / "model.onnx", sizes=(8, 16, 4), seed=1)
    config = load_config(model_dir)
    assert (config.backend, config.platform) == ("onnxruntime", "onnxruntime_onnx")
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [("INPUT0", mc.TYPE_FP32, [8])]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [("OUTPUT0", mc.TYPE_FP32, [4])]
    instance = instances(model_dir)
    [result] = instance.execute([request("mlp", {"INPUT0": np.ones((3, 8), np.float32)})])
    assert isinstance(result, InferResponse) and result.outputs[0].data.shape == (3, 4)


def test_configless_fixed_shape_model(tmp_path: Path, instances: LoadInstance) -> None:
    model_dir = fixed_identity(tmp_path)
    config = load_config(model_dir)
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [("x", mc.TYPE_INT64, [2, 3])]
    assert [(t.name, list(t.dims), t.HasField("reshape")) for t in config.output] == [("y", [2, 3], False)]
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    [result] = instances(model_dir).execute([request("fixed", {"x": x})])
    assert isinstance(result, InferResponse)
    np.testing.assert_array_equal(result.outputs[0].data, x)


def test_batching_config_for_a_model_that_cannot_batch_fails(tmp_path: Path) -> None:
    model_dir = fixed_identity(tmp_path, 'max_batch_size: 8\nplatform: "onnxruntime_onnx"\n')
    with pytest.raises(InvalidArgumentError, match=r"^autofill failed for model 'fixed'"):
        load_config(model_dir)


def test_batched_scalars_get_dims_1_and_an_empty_reshape(tmp_path: Path, instances: LoadInstance) -> None:
    model_dir = doubler(tmp_path, ["n"])
    config = load_config(model_dir)
    assert config.max_batch_size == 4
    for tensor in (*config.input, *config.output):
        assert list(tensor.dims) == [1]
        assert tensor.HasField("reshape") and list(tensor.reshape.shape) == []
    x = np.array([[1.0], [2.0], [3.0]], np.float32)
    [result] = instances(model_dir).execute([request("doubler", {"x": x})])
    assert isinstance(result, InferResponse)
    np.testing.assert_array_equal(result.outputs[0].data, 2 * x)  # [3, 1] in, [3, 1] out


def test_unbatched_scalars_get_dims_1_without_reshape(tmp_path: Path, instances: LoadInstance) -> None:
    model_dir = doubler(tmp_path, [])
    config = load_config(model_dir)
    assert config.max_batch_size == 0
    assert [(list(t.dims), t.HasField("reshape")) for t in config.input] == [([1], False)]
    [result] = instances(model_dir).execute([request("doubler", {"x": np.array([4.0], np.float32)})])
    assert isinstance(result, InferResponse)
    np.testing.assert_array_equal(result.outputs[0].data, np.array([8.0], np.float32))


def test_a_complete_config_is_left_alone(examples: Path) -> None:
    config = load_config(examples / "simple")
    assert config.max_batch_size == 8
    assert not config.HasField("dynamic_batching")  # Triton's simple has no scheduler either
    assert [t.name for t in config.input] == ["INPUT0", "INPUT1"]


def test_missing_outputs_are_filled_and_inputs_kept(tmp_path: Path) -> None:
    model_dir = doubler(
        tmp_path,
        ["n", 5],
        """
        max_batch_size: 1
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 5 ] } ]
        """,
    )
    config = load_config(model_dir)
    assert config.max_batch_size == 1
    assert not config.HasField("dynamic_batching")  # only added when max_batch_size > 1
    assert [(t.name, list(t.dims)) for t in config.input] == [("x", [5])]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [("y", mc.TYPE_FP32, [5])]


def test_an_existing_scheduler_is_kept(tmp_path: Path) -> None:
    model_dir = doubler(tmp_path, ["n", 5], "max_batch_size: 16\nsequence_batching {}\n")
    config = load_config(model_dir)
    assert config.max_batch_size == 16
    assert config.HasField("sequence_batching") and not config.HasField("dynamic_batching")
