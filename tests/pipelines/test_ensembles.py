"""Ensembles served end to end: the example add_sub -> mul pipeline over HTTP and gRPC, a diamond whose
branches run in parallel, per-step errors, and step models loaded and followed in EXPLICIT mode."""

from __future__ import annotations

import re
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.pipelines.conftest import BRANCH_DELAY
from tests.pipelines.models import copy_examples
from tests.support.server import ServerProcess

A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([4, 3, 2, 1], dtype=np.float32)


def _http_inputs(**arrays: np.ndarray) -> list[httpclient.InferInput]:
    inputs = []
    for name, array in arrays.items():
        tensor = httpclient.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def test_add_sub_then_mul_over_http_and_grpc(server: ServerProcess) -> None:
    expected = (A + B) * (A - B)
    client = httpclient.InferenceServerClient(server.http_url)
    result = client.infer("add_sub_mul", _http_inputs(INPUT0=A, INPUT1=B))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT"), expected)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT"]  # no intermediate tensors
    assert client.get_model_metadata("add_sub_mul")["platform"] == "ensemble"
    client.close()

    with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
        inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"), grpcclient.InferInput("INPUT1", [4], "FP32")]
        inputs[0].set_data_from_numpy(A)
        inputs[1].set_data_from_numpy(B)
        answer = grpc_client.infer("add_sub_mul", inputs, request_id="e1")
        np.testing.assert_array_equal(answer.as_numpy("OUTPUT"), expected)
        assert (answer.get_response().id, answer.get_response().model_version) == ("e1", "1")


def test_many_concurrent_ensemble_requests(server: ServerProcess) -> None:
    def one(i: int) -> np.ndarray:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            a = A + i
            return client.infer("add_sub_mul", _http_inputs(INPUT0=a, INPUT1=B)).as_numpy("OUTPUT") - (
                a + B
            ) * (a - B)
        finally:
            client.close()

    with ThreadPoolExecutor(16) as pool:
        for difference in pool.map(one, range(64)):
            assert not difference.any()


def test_diamond_branches_run_in_parallel(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    client.infer("diamond", _http_inputs(X=x))  # warm
    started = time.monotonic()
    result = client.infer("diamond", _http_inputs(X=x))
    elapsed = time.monotonic() - started
    np.testing.assert_array_equal(result.as_numpy("SUM"), (x + 1) + (x + 10))
    np.testing.assert_array_equal(result.as_numpy("DIFF"), np.full((2, 4), -9, dtype=np.float32))
    assert elapsed < 1.8 * BRANCH_DELAY, (
        f"the two {BRANCH_DELAY}s branches took {elapsed:.2f}s: not in parallel"
    )
    client.close()


def _failures(server: ServerProcess, model: str) -> tuple[int, dict[str, int]]:
    """The model's failed requests in its statistics, and its ``nv_inference_request_failure`` by reason."""
    client = httpclient.InferenceServerClient(server.http_url)
    failed = int(client.get_inference_statistics(model)["model_stats"][0]["inference_stats"]["fail"]["count"])
    client.close()
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics") as answer:
        text = answer.read().decode()
    pattern = rf'nv_inference_request_failure{{model="{model}",reason="(\w+)",version="1"}} (\d+)'
    return failed, {reason: int(count) for reason, count in re.findall(pattern, text)}


def test_a_failing_step_fails_the_ensemble_in_tritons_words(server: ServerProcess) -> None:
    """The ensemble named before the step's message, and counted as Triton 2.51 counts it (checked
    side by side with a failing step): twice for the ensemble, both times ``OTHER``, as the error it
    answers and as the request's end."""
    before = _failures(server, "diamond")
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        client.infer("diamond", _http_inputs(X=-np.ones((1, 4), dtype=np.float32)))
    assert info.value.status() == "400"
    # both branches fail; the first to do so is reported
    assert info.value.message() == "in ensemble 'diamond', negative input"
    client.close()
    after = _failures(server, "diamond")
    assert after[0] == before[0] + 2
    assert {reason: count - before[1][reason] for reason, count in after[1].items()} == {
        "REJECTED": 0, "CANCELED": 0, "BACKEND": 0, "OTHER": 2,
    }  # fmt: skip


def test_step_batching_is_shared_with_direct_traffic(server: ServerProcess) -> None:
    """A step is queued in its model's own scheduler: diamond's steps and direct requests to 'left'
    are batched together (left has dynamic batching and one slow instance)."""
    client = httpclient.InferenceServerClient(server.http_url, concurrency=8)
    x = np.ones((1, 4), dtype=np.float32)
    before = client.get_inference_statistics("left")["model_stats"][0]
    pending = [client.async_infer("diamond", _http_inputs(X=x)) for _ in range(4)]
    pending += [client.async_infer("left", _http_inputs(IN=x)) for _ in range(4)]
    for answer in pending:
        answer.get_result()
    after = client.get_inference_statistics("left")["model_stats"][0]
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == 8
    assert executions < inferences
    client.close()


def _write_steps_and_ensemble(repo: Path) -> None:
    copy_examples(repo, ("add_sub", "mul", "add_sub_mul"))


def test_explicit_loading_brings_up_the_steps_and_readiness_follows_them(
    tmp_path: Path, frontend_workers: int
) -> None:
    _write_steps_and_ensemble(tmp_path)
    with ServerProcess(
        [tmp_path], ["--model-control-mode=explicit"], frontend_workers=frontend_workers
    ) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert not client.is_model_ready("add_sub")
        client.load_model("add_sub_mul")
        assert client.is_model_ready("add_sub") and client.is_model_ready("mul")
        assert client.is_model_ready("add_sub_mul")

        client.unload_model("mul")
        assert not client.is_model_ready("add_sub_mul")
        rows = {row["name"]: row for row in client.get_model_repository_index()}
        assert rows["add_sub_mul"]["state"] == "UNAVAILABLE"
        assert (
            rows["add_sub_mul"]["reason"]
            == "ensemble 'add_sub_mul' depends on 'mul' which has no loaded version."
        )
        with pytest.raises(InferenceServerException, match="has no available versions"):
            client.infer("add_sub_mul", _http_inputs(INPUT0=A, INPUT1=B))
        assert not client.is_server_ready()

        client.load_model("mul")
        assert client.is_model_ready("add_sub_mul")
        np.testing.assert_array_equal(
            client.infer("add_sub_mul", _http_inputs(INPUT0=A, INPUT1=B)).as_numpy("OUTPUT"),
            (A + B) * (A - B),
        )
        assert client.is_server_ready()
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_config_reshapes_apply_to_the_steps_and_the_answer(server: ServerProcess, protocol: str) -> None:
    """As Triton 2.51's ensembles (qa's L0_infer_reshape): the step sees the inputs in their ``reshape``
    shape, and the client gets the outputs in their ``dims`` shape."""
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    data = np.arange(32, dtype=np.float32).reshape(2, 2, 8)
    tensor = module.InferInput("IN", [2, 2, 8], "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer("reshaped", [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUT"), data.reshape(2, 4, 4))
    client.close()
