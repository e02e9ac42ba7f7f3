"""Torch models served by a real server over HTTP, checked against eager torch and ONNX Runtime.

One network, three files: TorchScript (``pytorch_libtorch``), a ``torch.export`` program (``.pt2``)
and an ONNX export served by the ONNX Runtime backend; all must answer what eager torch computes.  The
TorchScript model has two instances and ``dynamic_batching``, so concurrent clients exercise instance
groups and, once the dynamic batcher batches, multi-request execution; every client checks its own
rows, whether or not its request was batched with others.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from torch import nn

from tests.backends.pytorch.models import (
    Array,
    eager,
    mlp,
    mlp_config,
    save_exported,
    save_onnx,
    save_torchscript,
)
from tests.support.server import ServerProcess

SIZES = (16, 64, 64, 8)
BATCHING = """
    dynamic_batching { max_queue_delay_microseconds: 2000 }
    instance_group [ { count: 2 kind: KIND_CPU } ]
"""


@pytest.fixture(scope="module")
def network() -> nn.Sequential:
    return mlp(SIZES, seed=3)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, network: nn.Sequential) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("torch-repo")
    save_torchscript(network, repo / "mlp_torch", mlp_config("pytorch_libtorch", 8, BATCHING, SIZES))
    save_onnx(
        network, torch.zeros(2, SIZES[0]), repo / "mlp_onnx", mlp_config("onnxruntime_onnx", 8, "", SIZES)
    )
    example = (torch.zeros(2, SIZES[0]),)
    pt2 = mlp_config("pytorch_libtorch", 8, 'default_model_filename: "model.pt2"', SIZES)
    save_exported(network, example, repo / "mlp_pt2", pt2)
    with ServerProcess([repo]) as process:
        yield process


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    connection = httpclient.InferenceServerClient(server.http_url, concurrency=4)
    yield connection
    connection.close()


def infer(client: httpclient.InferenceServerClient, model: str, batch: Array) -> Array:
    tensor = httpclient.InferInput("INPUT__0", list(batch.shape), "FP32")
    tensor.set_data_from_numpy(batch, binary_data=True)
    wanted = [httpclient.InferRequestedOutput("OUTPUT__0", binary_data=True)]
    result = client.infer(model, [tensor], outputs=wanted).as_numpy("OUTPUT__0")
    assert result is not None
    return result


@pytest.mark.parametrize("model", ["mlp_torch", "mlp_pt2"])
def test_torch_formats_answer_what_eager_torch_computes(
    client: httpclient.InferenceServerClient, network: nn.Sequential, model: str
) -> None:
    batch = np.random.default_rng(0).standard_normal((5, SIZES[0]), dtype=np.float32)
    np.testing.assert_allclose(infer(client, model, batch), eager(network, batch)[0], rtol=1e-5, atol=1e-6)


def test_torchscript_and_its_onnx_export_agree_through_both_backends(
    client: httpclient.InferenceServerClient, network: nn.Sequential
) -> None:
    batch = np.random.default_rng(1).standard_normal((8, SIZES[0]), dtype=np.float32)
    through_torch = infer(client, "mlp_torch", batch)
    through_onnx = infer(client, "mlp_onnx", batch)
    np.testing.assert_allclose(through_onnx, through_torch, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(through_onnx, eager(network, batch)[0], rtol=1e-5, atol=1e-5)


def test_concurrent_clients_each_get_their_own_rows(server: ServerProcess, network: nn.Sequential) -> None:
    failures: list[str] = []

    def run(seed: int) -> None:
        rng = np.random.default_rng(seed)
        connection = httpclient.InferenceServerClient(server.http_url)
        try:
            for _ in range(10):
                batch = rng.standard_normal((int(rng.integers(1, 5)), SIZES[0]), dtype=np.float32)
                got = infer(connection, "mlp_torch", batch)
                if not np.allclose(got, eager(network, batch)[0], rtol=1e-5, atol=1e-6):
                    failures.append(f"client {seed}: wrong rows for a batch of {len(batch)}")
        except Exception as exc:  # reported below with the client it happened in
            failures.append(f"client {seed}: {exc!r}")
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(seed,)) for seed in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_config_reports_triton_platform_and_instance_groups(client: httpclient.InferenceServerClient) -> None:
    config = client.get_model_config("mlp_torch")
    assert (config["platform"], config["backend"]) == ("pytorch_libtorch", "pytorch")
    assert config["default_model_filename"] == "model.pt"
    assert [(g["count"], g["kind"]) for g in config["instance_group"]] == [(2, "KIND_CPU")]
    metadata = client.get_model_metadata("mlp_torch")
    assert metadata["platform"] == "pytorch_libtorch"
    assert metadata["inputs"] == [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, SIZES[0]]}]
