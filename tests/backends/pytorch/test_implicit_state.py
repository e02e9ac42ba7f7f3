"""Implicit sequence state (``sequence_batching.state``) on TorchScript models, served by a real server.

Triton's PyTorch backend feeds a state as the ``forward`` argument at the index its input name gives
(``<name>__<index>``) and reads the next state from the returned tuple at its output name's index; the
sequence batcher keeps it between a sequence's requests.  A running sum shows that each sequence keeps
its own state, that START resets it, and that a sequence's last state never leaks into the next one
on the same slot; configurations that break the naming rule fail to load with Triton's message.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
from torch import Tensor, nn
from tritonclient.utils import InferenceServerException

from tests.backends.pytorch.models import save_torchscript
from tests.support.server import ServerProcess


class RunningSum(nn.Module):
    """``(VALUE__0, START__1, STATE_IN__2) -> (SUM__0, STATE_OUT__1)``: the sum of the sequence's values
    so far, restarted by START; the state is the sum."""

    def forward(self, value: Tensor, start: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        total = torch.where(start > 0, value, state + value)
        return total, total


def _config(
    name: str, state_in: str = "STATE_IN__2", state_out: str = "STATE_OUT__1", value: str = "VALUE__0"
) -> str:
    return f"""
    name: "{name}"
    backend: "pytorch"
    max_batch_size: 2
    input [{{ name: "{value}" data_type: TYPE_FP32 dims: [ 1 ] }}]
    output [{{ name: "SUM__0" data_type: TYPE_FP32 dims: [ 1 ] }}]
    sequence_batching {{
      max_sequence_idle_microseconds: 5000000
      control_input [{{ name: "START__1" control [{{ kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] }}] }}]
      state [{{
        input_name: "{state_in}" output_name: "{state_out}" data_type: TYPE_FP32 dims: [ 1 ]
        initial_state {{ name: "zero" data_type: TYPE_FP32 dims: [ 1 ] zero_data: true }}
      }}]
    }}
    instance_group [{{ count: 1 kind: KIND_CPU }}]
    """


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("torch-state")
    module = RunningSum()
    save_torchscript(module, repo / "running_sum", _config("running_sum"))
    save_torchscript(module, repo / "unnamed_state", _config("unnamed_state", state_in="STATE_IN"))
    save_torchscript(module, repo / "unnamed_input", _config("unnamed_input", value="VALUE"))
    with ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=running_sum"]) as process:
        yield process


def _step(
    client: grpcclient.InferenceServerClient,
    sequence: int,
    value: float,
    start: bool = False,
    end: bool = False,
) -> float:
    tensor = grpcclient.InferInput("VALUE__0", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.float32))
    result = client.infer(
        "running_sum",
        [tensor],
        sequence_id=sequence,
        sequence_start=start,
        sequence_end=end,
        outputs=[grpcclient.InferRequestedOutput("SUM__0")],
    )
    assert result.get_output("STATE_OUT__1") is None  # the state is the server's, never the client's
    return float(result.as_numpy("SUM__0")[0, 0])


def test_each_sequence_keeps_its_own_state(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert _step(client, 1, 1.0, start=True) == 1.0
        assert _step(client, 2, 10.0, start=True) == 10.0
        assert _step(client, 1, 2.0) == 3.0
        assert _step(client, 2, 20.0) == 30.0
        assert _step(client, 1, 4.0, end=True) == 7.0
        assert _step(client, 2, 30.0, end=True) == 60.0
        # a new sequence starts from the initial state, not from the last one on its slot
        assert _step(client, 3, 5.0, start=True) == 5.0
        assert _step(client, 3, 1.5, end=True) == 6.5


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            "unnamed_state",
            "is using sequence batching with state but state 'STATE_IN' does not follow the "
            "<name>__<index> naming convention",
        ),
        (
            "unnamed_input",
            "is using sequence batching with state but not all inputs and outputs follow the "
            "<name>__<index> naming convention",
        ),
    ],
)
def test_states_need_the_named_index_convention(server: ServerProcess, model: str, message: str) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as refused:
            client.load_model(model)
        assert f"PyTorch model '{model}' {message}" in refused.value.message()
        assert client.is_model_ready("running_sum")
