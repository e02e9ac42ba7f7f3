"""Ragged inputs, batch inputs and batch outputs on real TorchScript models: ``forward`` gets a ragged
input flattened and joined end to end and each ``batch_input`` as one more argument, placed as Triton's
PyTorch backend places it (by ``forward``'s argument names, by ``<name>__<index>``, or after the inputs
in config order); a ``batch_output`` is cut back in each request's source input's shape."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from naiad.core.errors import InvalidArgumentError
from naiad.core.request import InferResponse
from torch import Tensor, nn

from tests.backends.onnxruntime.models import LoadInstance, request
from tests.backends.pytorch.models import save_torchscript
from tests.support.http import infer_concurrently
from tests.support.server import ServerProcess

RAGGED_IO = """
    backend: "pytorch"
    max_batch_size: 8
    input [ { name: "RAGGED" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
    output [
      { name: "DOUBLED" data_type: TYPE_FP32 dims: [ -1 ] },
      { name: "COUNTS" data_type: TYPE_INT32 dims: [ 1 ] },
      { name: "TOTALS" data_type: TYPE_FP32 dims: [ 1 ] }
    ]
    batch_input [
      { kind: BATCH_ELEMENT_COUNT target_name: "COUNT" data_type: TYPE_INT32 source_input: "RAGGED" },
      { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "TOTAL" data_type: TYPE_FP32 source_input: "RAGGED" }
    ]
    batch_output [ { target_name: "DOUBLED" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "RAGGED" } ]
    """


class ByName(nn.Module):
    """The batch inputs named as ``forward``'s arguments, in an order of their own."""

    def forward(self, TOTAL: Tensor, RAGGED: Tensor, COUNT: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return RAGGED * 2, COUNT.view(-1, 1), TOTAL.view(-1, 1)


class InConfigOrder(nn.Module):
    """Arguments named after none of the config's tensors: the input first, then the batch inputs."""

    def forward(self, values: Tensor, counts: Tensor, totals: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return values * 2, counts.view(-1, 1), totals.view(-1, 1)


@pytest.mark.parametrize("module", [ByName(), InConfigOrder()], ids=["by-name", "config-order"])
def test_one_call_gets_its_batch_inputs_and_scatters_the_output(
    tmp_path: Path, instances: LoadInstance, module: nn.Module
) -> None:
    instance = instances(save_torchscript(module, tmp_path / "ragged", RAGGED_IO))
    sizes = (2, 4, 1)
    results = instance.execute([request("ragged", {"RAGGED": np.full((1, n), n, np.float32)}) for n in sizes])
    answers = []
    for result in results:
        assert isinstance(result, InferResponse), result
        answers.append({tensor.name: tensor.data.tolist() for tensor in result.outputs})
    assert [a["DOUBLED"] for a in answers] == [[[2.0 * n] * n] for n in sizes]
    assert [a["COUNTS"] for a in answers] == [[[2]], [[4]], [[1]]]
    assert [a["TOTALS"] for a in answers] == [[[2.0]], [[6.0]], [[7.0]]]


def test_a_lone_ragged_request_is_flattened_and_gets_its_batch_inputs(
    tmp_path: Path, instances: LoadInstance
) -> None:
    instance = instances(save_torchscript(ByName(), tmp_path / "ragged", RAGGED_IO))
    [result] = instance.execute([request("ragged", {"RAGGED": np.ones((1, 3), np.float32)})])
    assert isinstance(result, InferResponse), result
    outputs = {tensor.name: tensor.data.tolist() for tensor in result.outputs}
    assert outputs == {"COUNTS": [[3]], "DOUBLED": [[2.0] * 3], "TOTALS": [[3.0]]}


class Misnamed(nn.Module):
    def forward(self, RAGGED: Tensor, count: Tensor, TOTAL: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return RAGGED, count, TOTAL


def test_a_batch_input_forward_does_not_name_fails_to_load_naming_it(
    tmp_path: Path, instances: LoadInstance
) -> None:
    model_dir = save_torchscript(Misnamed(), tmp_path / "ragged", RAGGED_IO)
    with pytest.raises(
        InvalidArgumentError, match="batch input 'COUNT' is not an argument of the model's forward"
    ):
        instances(model_dir)


def test_a_server_batches_ragged_requests_into_one_forward(tmp_path: Path) -> None:
    """Three requests of different lengths, held until all three queued (Triton's start delay), run
    as one call: each gets its own doubled elements and the batch's running totals."""
    save_torchscript(ByName(), tmp_path / "ragged", RAGGED_IO + "dynamic_batching { }\n")
    sizes = (2, 4, 1)
    bodies = [
        {"id": f"r{n}", "inputs": [{"name": "RAGGED", "datatype": "FP32", "shape": [1, n], "data": [float(n)] * n}]}
        for n in sizes
    ]  # fmt: skip
    with ServerProcess([tmp_path], env={"TRITONSERVER_DELAY_SCHEDULER": "3"}) as server:
        answers = infer_concurrently(server.http_url, "ragged", bodies)
    assert [a["DOUBLED"] for a in answers] == [[2.0 * n] * n for n in sizes]
    assert [a["COUNTS"] for a in answers] == [[2], [4], [1]]
    # one call, the requests in the order they queued: its running totals end at 2 + 4 + 1
    assert sorted(a["TOTALS"][0] for a in answers)[-1] == 7.0
