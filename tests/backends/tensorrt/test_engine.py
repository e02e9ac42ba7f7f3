"""TensorRT engines built here, served on a GPU: profiles, batching, auto-complete, the server over HTTP.

These run only where TensorRT and a CUDA GPU are present (the GPU server image on a GPU node); elsewhere
they are skipped with the reason.  The engine is a linear layer built with TensorRT's network API, with
two optimization profiles (batches 1-8 and 9-64), so the expected output is plain numpy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from naiad.core.errors import InvalidArgumentError
from naiad.core.request import InferResponse

from tests.backends.onnxruntime.models import instance_context, load_config, request
from tests.backends.pytorch.models import write_config
from tests.support.backends import get_backend
from tests.support.server import ServerProcess

trt = pytest.importorskip("tensorrt", reason="TensorRT is not installed (the GPU server image provides it)")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU and a CUDA build of torch"),
]

WIDTH_IN, WIDTH_OUT = 16, 8
RNG = np.random.default_rng(5)
WEIGHT = RNG.standard_normal((WIDTH_IN, WIDTH_OUT), dtype=np.float32)
BIAS = RNG.standard_normal((1, WIDTH_OUT), dtype=np.float32)


def build_plan(path: Path) -> None:
    """A serialized engine computing ``INPUT__0 @ WEIGHT + BIAS`` for batches of 1 to 64."""
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    major = int(trt.__version__.split(".")[0])
    flags = 0 if major >= 10 else 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    x = network.add_input("INPUT__0", trt.float32, (-1, WIDTH_IN))
    weight = network.add_constant((WIDTH_IN, WIDTH_OUT), trt.Weights(WEIGHT))
    bias = network.add_constant((1, WIDTH_OUT), trt.Weights(BIAS))
    none = trt.MatrixOperation.NONE
    product = network.add_matrix_multiply(x, none, weight.get_output(0), none)
    total = network.add_elementwise(product.get_output(0), bias.get_output(0), trt.ElementWiseOperation.SUM)
    output = total.get_output(0)
    output.name = "OUTPUT__0"
    network.mark_output(output)
    config = builder.create_builder_config()
    for low, opt, high in ((1, 4, 8), (9, 32, 64)):
        profile = builder.create_optimization_profile()
        profile.set_shape("INPUT__0", (low, WIDTH_IN), (opt, WIDTH_IN), (high, WIDTH_IN))
        config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    assert plan is not None, "TensorRT could not build the test engine"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(plan))


def plan_model(root: Path, config: str) -> Path:
    model_dir = write_config(root / "mlp_plan", config)
    build_plan(model_dir / "1" / "model.plan")
    return model_dir


def config_text(max_batch_size: int, groups: str) -> str:
    return f"""
        platform: "tensorrt_plan"
        max_batch_size: {max_batch_size}
        input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {WIDTH_IN} ] }} ]
        output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {WIDTH_OUT} ] }} ]
        {groups}
        """


def result_of(result: object) -> np.ndarray[Any, Any]:
    assert isinstance(result, InferResponse), result
    return result.outputs[0].data


def test_requests_batch_and_run_under_the_profile_that_fits(tmp_path: Path) -> None:
    groups = 'instance_group [ { name: "mlp_plan" profile: [ "0", "1" ] } ]'
    model_dir = plan_model(tmp_path, config_text(64, groups))
    instance = get_backend("tensorrt").create_instance(instance_context(model_dir, "GPU", 0))
    try:
        batches = [RNG.standard_normal((n, WIDTH_IN), dtype=np.float32) for n in (1, 3)]
        small = instance.execute([request("mlp_plan", {"INPUT__0": b}) for b in batches])  # 4 rows: profile 0
        for batch, result in zip(batches, small, strict=True):
            np.testing.assert_allclose(result_of(result), batch @ WEIGHT + BIAS, rtol=1e-4, atol=1e-4)
        large = RNG.standard_normal((40, WIDTH_IN), dtype=np.float32)  # profile 1
        [result] = instance.execute([request("mlp_plan", {"INPUT__0": large})])
        np.testing.assert_allclose(result_of(result), large @ WEIGHT + BIAS, rtol=1e-4, atol=1e-4)
    finally:
        instance.close()


def test_a_batch_no_allowed_profile_accepts_fails_alone(tmp_path: Path) -> None:
    model_dir = plan_model(tmp_path, config_text(8, ""))  # profile 0 only: batches up to 8
    instance = get_backend("tensorrt").create_instance(instance_context(model_dir, "GPU", 0))
    try:
        rows = RNG.standard_normal((8, WIDTH_IN), dtype=np.float32)
        first, second = instance.execute(
            [request("mlp_plan", {"INPUT__0": rows}), request("mlp_plan", {"INPUT__0": rows[:1]})]
        )  # 9 rows together fit no allowed profile
        assert isinstance(first, InvalidArgumentError) and "no optimization profile" in first.message
        assert isinstance(second, InvalidArgumentError)
    finally:
        instance.close()


def test_auto_complete_reads_the_engine(tmp_path: Path) -> None:
    model_dir = plan_model(tmp_path, 'platform: "tensorrt_plan"')
    config = load_config(model_dir)
    assert config.max_batch_size == 8
    assert [(io.name, list(io.dims)) for io in config.input] == [("INPUT__0", [WIDTH_IN])]
    assert [(io.name, list(io.dims)) for io in config.output] == [("OUTPUT__0", [WIDTH_OUT])]
    assert config.HasField("dynamic_batching")


def test_served_on_kind_gpu_over_http(tmp_path: Path) -> None:
    groups = 'instance_group [ { kind: KIND_GPU count: 2 profile: [ "0", "1" ] } ]'
    plan_model(tmp_path / "repo", config_text(64, groups + "\ndynamic_batching { }"))
    with ServerProcess([tmp_path / "repo"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            for rows in (2, 33):
                batch = RNG.standard_normal((rows, WIDTH_IN), dtype=np.float32)
                tensor = httpclient.InferInput("INPUT__0", list(batch.shape), "FP32")
                tensor.set_data_from_numpy(batch)
                got = client.infer("mlp_plan", [tensor]).as_numpy("OUTPUT__0")
                np.testing.assert_allclose(got, batch @ WEIGHT + BIAS, rtol=1e-4, atol=1e-4)
        finally:
            client.close()
