"""PyTorch instances in process: binding conventions, batching, strings, errors, parameters, devices."""

from __future__ import annotations

import ctypes
import logging
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from naiad.backends.pytorch import options
from naiad.core.errors import (
    ErrorCode,
    InferenceServerError,
    InternalError,
    InvalidArgumentError,
    UnavailableError,
)
from naiad.core.request import InferResponse
from torch import Tensor, nn

from tests.backends.onnxruntime.models import LoadInstance, instance_context, request
from tests.backends.pytorch.models import (
    Array,
    Difference,
    TwoHeads,
    Upper,
    eager,
    mlp,
    mlp_config,
    save_exported,
    save_torchscript,
)
from tests.support.backends import get_backend

RNG = np.random.default_rng(7)


class BatchSize(nn.Module):
    """Returns, for every row, how many rows ``forward`` was called with: shows which requests ran together."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.full((x.shape[0], 1), float(x.shape[0]))


class RejectsNegatives(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        if bool((x < 0).any()):
            raise RuntimeError("negative input")
        return x * 2


def outputs(result: object) -> dict[str, Array]:
    assert isinstance(result, InferResponse), result
    return {tensor.name: tensor.data for tensor in result.outputs}


def two_heads_config(inputs: list[tuple[str, int]], outputs: list[tuple[str, int]], extra: str = "") -> str:
    def io(entries: list[tuple[str, int]]) -> str:
        return ", ".join(f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ {d} ] }}' for n, d in entries)

    return f"""
        platform: "pytorch_libtorch"
        max_batch_size: 8
        input [ {io(inputs)} ]
        output [ {io(outputs)} ]
        {extra}
        """


@pytest.mark.parametrize(
    ("features", "offset", "shifted", "total", "config_order"),
    [
        # forward's argument names, in the opposite order to forward's; outputs by <name>__<index>
        ("features", "offset", "OUTPUT__0", "OUTPUT__1", "reversed"),
        # <name>__<index> for inputs too, listed out of order
        ("INPUT__0", "INPUT__1", "OUTPUT__0", "OUTPUT__1", "reversed"),
        # neither: config order is forward's order
        ("A", "B", "SHIFTED", "TOTAL", "forward"),
    ],
)
def test_inputs_and_outputs_bind_by_triton_naming_conventions(
    tmp_path: Path,
    instances: LoadInstance,
    features: str,
    offset: str,
    shifted: str,
    total: str,
    config_order: str,
) -> None:
    ins, outs = [(features, 4), (offset, 3)], [(shifted, 3), (total, 1)]
    if config_order == "reversed":
        ins, outs = ins[::-1], outs[::-1]
    module = TwoHeads()
    instance = instances(save_torchscript(module, tmp_path / "two_heads", two_heads_config(ins, outs)))
    x = RNG.standard_normal((2, 4), dtype=np.float32)
    y = RNG.standard_normal((2, 3), dtype=np.float32)
    [result] = instance.execute([request("two_heads", {features: x, offset: y})])
    got = outputs(result)
    want = eager(module, x, y)
    np.testing.assert_allclose(got[shifted], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[total], want[1], rtol=1e-6)
    # all outputs, by name whatever the config's order: Triton's PyTorch backend keeps them in a std::map
    assert list(got) == sorted(name for name, _ in outs)


def test_requests_with_equal_shapes_run_as_one_call_and_split_back(
    tmp_path: Path, instances: LoadInstance
) -> None:
    config = """
        platform: "pytorch_libtorch"
        max_batch_size: 8
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """
    instance = instances(save_torchscript(BatchSize(), tmp_path / "batch_size", config))
    shapes = [(1, 2), (2, 2), (1, 3), (3, 2)]
    results = instance.execute([request("batch_size", {"INPUT__0": np.zeros(s, np.float32)}) for s in shapes])
    seen = [outputs(result)["OUTPUT__0"] for result in results]
    assert [s.shape for s in seen] == [(1, 1), (2, 1), (1, 1), (3, 1)]  # each request its own rows
    assert [float(s[0, 0]) for s in seen] == [6.0, 6.0, 1.0, 6.0]  # [?,2] ran together, [1,3] alone


def test_batched_results_match_eager_per_request(tmp_path: Path, instances: LoadInstance) -> None:
    module = mlp()
    instance = instances(save_torchscript(module, tmp_path / "mlp", mlp_config("pytorch_libtorch")))
    batches = [RNG.standard_normal((n, 8), dtype=np.float32) for n in (1, 3, 4)]
    results = instance.execute([request("mlp", {"INPUT__0": b}) for b in batches])
    for batch, result in zip(batches, results, strict=True):
        np.testing.assert_allclose(
            outputs(result)["OUTPUT__0"], eager(module, batch)[0], rtol=1e-5, atol=1e-6
        )


def test_two_instances_of_one_model_run_concurrently(tmp_path: Path, instances: LoadInstance) -> None:
    module = mlp()
    config = mlp_config("pytorch_libtorch", extra="instance_group [ { count: 2 kind: KIND_CPU } ]")
    model_dir = save_torchscript(module, tmp_path / "mlp", config)
    pair = [instances(model_dir), instances(model_dir)]
    batch = RNG.standard_normal((4, 8), dtype=np.float32)
    want = eager(module, batch)[0]
    failures: list[str] = []

    def hammer(instance: Any) -> None:
        for _ in range(50):
            [result] = instance.execute([request("mlp", {"INPUT__0": batch})])
            if not np.allclose(outputs(result)["OUTPUT__0"], want, rtol=1e-5, atol=1e-6):
                failures.append("mismatch")

    threads = [threading.Thread(target=hammer, args=(instance,)) for instance in pair]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_strings_travel_as_list_of_str_and_bad_utf8_fails_alone(
    tmp_path: Path, instances: LoadInstance
) -> None:
    config = """
        platform: "pytorch_libtorch"
        input [ { name: "TEXT__0" data_type: TYPE_STRING dims: [ -1 ] } ]
        output [ { name: "UPPER__0" data_type: TYPE_STRING dims: [ -1 ] } ]
        """
    instance = instances(save_torchscript(Upper(), tmp_path / "upper", config))
    good = np.array([b"abc", "\u00e9t\u00e9".encode()], dtype=np.object_)
    bad = np.array([b"\xff"], dtype=np.object_)
    first, second = instance.execute(
        [request("upper", {"TEXT__0": good}), request("upper", {"TEXT__0": bad})]
    )
    assert outputs(first)["UPPER__0"].tolist() == [
        b"ABC",
        "\u00e9T\u00e9".encode(),
    ]  # TorchScript's ASCII upper()
    assert isinstance(second, InvalidArgumentError) and "not valid UTF-8" in second.message


def test_dict_input_receives_inputs_under_their_config_names(tmp_path: Path, instances: LoadInstance) -> None:
    config = """
        platform: "pytorch_libtorch"
        input [ { name: "b" data_type: TYPE_INT64 dims: [ 3 ] }, { name: "a" data_type: TYPE_INT64 dims: [ 3 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_INT64 dims: [ 3 ] } ]
        """
    instance = instances(save_torchscript(Difference(), tmp_path / "difference", config))
    a, b = np.array([5, 7, 9], np.int64), np.array([1, 2, 3], np.int64)
    [result] = instance.execute([request("difference", {"a": a, "b": b})])
    np.testing.assert_array_equal(outputs(result)["OUTPUT__0"], a - b)


@pytest.mark.parametrize(
    ("config", "error", "message"),
    [
        (
            two_heads_config([("INPUT__0", 4)], [("OUTPUT__0", 3)]),
            InvalidArgumentError,
            "unable to load model 'two_heads', configuration expects 1 inputs, model provides 2",
        ),
        (
            two_heads_config([("INPUT__0", 4), ("INPUT__1", 3)], [("OUTPUT__0", 3)]).replace(
                '"INPUT__1" data_type: TYPE_FP32', '"INPUT__1" data_type: TYPE_UINT16'
            ),
            InternalError,
            "unsupported datatype TYPE_UINT16 for input 'INPUT__1' for model 'two_heads'",
        ),
        (
            two_heads_config([("INPUT__0", 4), ("INPUT__2", 3)], [("OUTPUT__0", 3)]),
            InvalidArgumentError,
            "unable to load model 'two_heads', input indices [0, 2] do not name each of the model's 2 "
            "arguments exactly once",
        ),
        (
            'platform: "pytorch_libtorch"\noutput [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ]',
            InvalidArgumentError,  # (the count first, as Triton's backend: qa/L0_model_config)
            "unable to load model 'two_heads', configuration expects 0 inputs, model provides 2",
        ),
        (
            two_heads_config(
                [("features", 4), ("offset", 3)],
                [("OUTPUT__0", 3)],
                'parameters { key: "INFERENCE_MODE" value { string_value: "maybe" } }',
            ),
            InvalidArgumentError,
            "failed to convert 'maybe' to boolean (parameter 'INFERENCE_MODE')",
        ),
    ],
)
def test_configs_that_cannot_work_fail_at_load(
    tmp_path: Path, instances: LoadInstance, config: str, error: type[InferenceServerError], message: str
) -> None:
    model_dir = save_torchscript(TwoHeads(), tmp_path / "two_heads", config)
    with pytest.raises(error) as raised:
        instances(model_dir)
    assert raised.value.message == message


def test_missing_model_file_is_unavailable(tmp_path: Path, instances: LoadInstance) -> None:
    model_dir = save_torchscript(mlp(), tmp_path / "mlp", mlp_config("pytorch_libtorch"))
    (model_dir / "1" / "model.pt").unlink()
    with pytest.raises(UnavailableError, match=r"unable to find '.*model\.pt' for model instance 'mlp'"):
        instances(model_dir)


MLP_FP64_OUTPUT = mlp_config("pytorch_libtorch").replace(
    '"OUTPUT__0" data_type: TYPE_FP32', '"OUTPUT__0" data_type: TYPE_FP64'
)
MLP_THIRD_OUTPUT = mlp_config("pytorch_libtorch").replace(
    "dims: [ 4 ] } ]", 'dims: [ 4 ] }, { name: "OUTPUT__3" data_type: TYPE_FP32 dims: [ 4 ] } ]'
)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            MLP_FP64_OUTPUT,
            "configuration expects datatype TYPE_FP64 for output 'OUTPUT__0', model provides TYPE_FP32",
        ),
        (
            MLP_THIRD_OUTPUT,
            "The output OUTPUT__3 in the model configuration refers to an output index which doesn't exist. "
            "This model has 1 outputs",
        ),
    ],
)
def test_outputs_that_disagree_with_the_config_fail_the_requests(
    tmp_path: Path, instances: LoadInstance, config: str, message: str
) -> None:
    instance = instances(save_torchscript(mlp(), tmp_path / "mlp", config))
    [result] = instance.execute([request("mlp", {"INPUT__0": np.zeros((1, 8), np.float32)})])
    assert isinstance(result, InvalidArgumentError)
    assert result.message == message


def test_a_failing_forward_fails_its_call_and_the_instance_keeps_serving(
    tmp_path: Path, instances: LoadInstance
) -> None:
    config = mlp_config("pytorch_libtorch", max_batch_size=0, sizes=(3, 3))
    instance = instances(save_torchscript(RejectsNegatives(), tmp_path / "strict", config))
    [failed] = instance.execute([request("strict", {"INPUT__0": np.array([1, -1, 2], np.float32)})])
    assert isinstance(failed, InternalError) and failed.code is ErrorCode.INTERNAL
    assert failed.message.startswith("PyTorch execute failure: ") and "negative input" in failed.message
    [ok] = instance.execute([request("strict", {"INPUT__0": np.array([1, 2, 3], np.float32)})])
    np.testing.assert_array_equal(outputs(ok)["OUTPUT__0"], [2, 4, 6])


#: The OpenMP runtime torch's Linux wheels bundle; reading its per-thread setting directly does not
#: trigger torch's own lazy per-thread initialisation, which would hide a missing setting.
GOMP = Path(torch.__file__).parent / "lib" / "libgomp.so.1"


@pytest.mark.skipif(not GOMP.is_file(), reason="this torch build does not bundle GNU OpenMP")
def test_triton_parameters_change_how_calls_run_not_what_they_return(
    tmp_path: Path, instances: LoadInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(options, "_THREADS_SET", {})
    threads = torch.get_num_threads()
    params = {"INFERENCE_MODE": "false", "DISABLE_OPTIMIZED_EXECUTION": "true", "INTRA_OP_THREAD_COUNT": "1"}
    extra = " ".join(
        f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}' for k, v in params.items()
    )
    module = mlp()
    batch = RNG.standard_normal((2, 8), dtype=np.float32)
    seen: dict[str, Any] = {}

    def run_on_a_fresh_thread() -> None:  # as an instance's own thread does
        [seen["result"]] = instance.execute([request("mlp", {"INPUT__0": batch})])
        seen["threads"] = ctypes.CDLL(str(GOMP)).omp_get_max_threads()  # this thread's, as MKL reads it

    try:
        instance = instances(
            save_torchscript(module, tmp_path / "mlp", mlp_config("pytorch_libtorch", extra=extra))
        )
        thread = threading.Thread(target=run_on_a_fresh_thread)
        thread.start()
        thread.join()
        assert seen["threads"] == 1  # a per-thread OpenMP setting: it must reach the thread that executes
        np.testing.assert_allclose(
            outputs(seen["result"])["OUTPUT__0"], eager(module, batch)[0], rtol=1e-5, atol=1e-6
        )
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize(
    ("platform", "extra"),
    [("torch_aoti", ""), ("pytorch_libtorch", 'default_model_filename: "model.pt2"')],
)
def test_torch_export_programs_serve_as_pt2(
    tmp_path: Path, instances: LoadInstance, platform: str, extra: str
) -> None:
    module = TwoHeads()
    example = (torch.zeros(2, 4), torch.zeros(2, 3))
    config = two_heads_config([("offset", 3), ("features", 4)], [("OUTPUT__0", 3), ("OUTPUT__1", 1)], extra)
    model_dir = save_exported(
        module, example, tmp_path / "two_heads", config.replace("pytorch_libtorch", platform)
    )
    instance = instances(model_dir)
    x = RNG.standard_normal((5, 4), dtype=np.float32)
    y = RNG.standard_normal((5, 3), dtype=np.float32)
    [result] = instance.execute([request("two_heads", {"features": x, "offset": y})])
    want = eager(module, x, y)
    np.testing.assert_allclose(outputs(result)["OUTPUT__0"], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outputs(result)["OUTPUT__1"], want[1], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has CUDA: the GPU test covers KIND_GPU")
def test_gpu_instance_without_cuda_is_unavailable(tmp_path: Path, instances: LoadInstance) -> None:
    model_dir = save_torchscript(mlp(), tmp_path / "mlp", mlp_config("pytorch_libtorch"))
    with pytest.raises(
        UnavailableError, match=r"unable to load model 'mlp' on GPU 0: the installed torch .* has no CUDA"
    ):
        instances(model_dir, kind="GPU", device_id=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU and a CUDA build of torch")
def test_gpu_instance_runs_on_its_device_and_matches_eager(tmp_path: Path, instances: LoadInstance) -> None:
    module = mlp()
    instance = instances(
        save_torchscript(module, tmp_path / "mlp", mlp_config("pytorch_libtorch")), kind="GPU"
    )
    batches = [RNG.standard_normal((n, 8), dtype=np.float32) for n in (1, 4)]
    results = instance.execute([request("mlp", {"INPUT__0": b}) for b in batches])
    for batch, result in zip(batches, results, strict=True):
        np.testing.assert_allclose(
            outputs(result)["OUTPUT__0"], eager(module, batch)[0], rtol=1e-4, atol=1e-5
        )


@pytest.mark.parametrize("shared", [True, False])
def test_weight_sharing_loads_a_model_once_per_device(
    tmp_path: Path, shared: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """``ENABLE_WEIGHT_SHARING``: the instances of one load on one device run one program (Triton
    logs "Reusing TorchScript model for instance"); without it each loads its own.  Either way
    every instance answers, and the program stays while an instance holds it."""
    parameter = f'parameters {{ key: "ENABLE_WEIGHT_SHARING" value {{ string_value: "{str(shared).lower()}" }} }}'
    module = mlp()
    model_dir = save_torchscript(module, tmp_path / "mlp", mlp_config("pytorch_libtorch", extra=parameter))
    context = instance_context(model_dir)
    backend = get_backend("pytorch")
    batch = RNG.standard_normal((2, 8), dtype=np.float32)
    with caplog.at_level(logging.INFO, logger="naiad.backends.pytorch"):
        first = backend.create_instance(context)
        second = backend.create_instance(replace(context, instance_name="mlp_1"))
    try:
        assert (first._model is second._model) is shared  # type: ignore[attr-defined]
        assert caplog.text.count("Reusing TorchScript model for instance 'mlp_1'") == int(shared)
        said = "enabled" if shared else "disabled"
        assert caplog.text.count(f"Weight sharing is {said} for model instance 'mlp'") == 1
        assert caplog.text.count("Inference Mode is enabled for model instance 'mlp'") == 1
        first.close()  # the other instance keeps the program
        [result] = second.execute([request("mlp", {"INPUT__0": batch})])
        np.testing.assert_allclose(outputs(result)["OUTPUT__0"], eager(module, batch)[0], rtol=1e-5, atol=1e-6)
    finally:
        first.close()
        second.close()
