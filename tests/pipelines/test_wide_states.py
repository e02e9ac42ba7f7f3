"""Implicit states too large to travel inside a message (the request's tensors then lie in a frontend
worker's shared memory, reused once the request is answered): each sequence keeps its own state in
both server modes, whether the model computes the state anew (ONNX Runtime, whose outputs the backend
writes where the worker reads the response) or hands an input back as the state (a Python model in a
model process, whose output then lies where the worker wrote the request).  A state's output that the
config also declares an output is answered to a client that asks for it, as in Triton."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from tests.support.models import write_model
from tests.support.server import ServerProcess

#: Elements of each state: 400 KB of INT32, far past what a message carries inline.
WIDTH = 100_000
SEQUENCES = (1, 2, 3)
STEPS = 6

SUMMING = f"""
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ {WIDTH} ] }} ]
output [
  {{ name: "HEAD" data_type: TYPE_INT32 dims: [ 4 ] }},
  {{ name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ {WIDTH} ] }}
]
sequence_batching {{
  max_sequence_idle_microseconds: 60000000
  state [ {{ input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ {WIDTH} ] }} ]
}}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

ECHO = f"""
backend: "python"
max_batch_size: 4
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ {WIDTH} ] }} ]
output [ {{ name: "HEAD" data_type: TYPE_INT32 dims: [ 4 ] }} ]
sequence_batching {{
  max_sequence_idle_microseconds: 60000000
  state [ {{ input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ {WIDTH} ] }} ]
}}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

#: HEAD is the head of the state it got (the previous request's INPUT); the state is INPUT itself.
ECHO_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            state = pb_utils.get_input_tensor_by_name(request, "INPUT_STATE").as_numpy()
            given = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("HEAD", state[:, :4].copy()),
                pb_utils.Tensor("OUTPUT_STATE", given),
            ]))
        return responses
"""


def _write_summing(repo: Path) -> None:
    """OUTPUT_STATE = INPUT + INPUT_STATE; HEAD its first four elements."""
    wide = [
        helper.make_tensor_value_info(n, TensorProto.INT32, ["b", WIDTH]) for n in ("INPUT", "INPUT_STATE")
    ]
    outputs = [
        helper.make_tensor_value_info("HEAD", TensorProto.INT32, ["b", 4]),
        helper.make_tensor_value_info("OUTPUT_STATE", TensorProto.INT32, ["b", WIDTH]),
    ]
    bounds = [
        helper.make_tensor(n, TensorProto.INT64, [1], [v]) for n, v in (("zero", 0), ("four", 4), ("one", 1))
    ]
    nodes = [
        helper.make_node("Add", ["INPUT", "INPUT_STATE"], ["OUTPUT_STATE"]),
        helper.make_node("Slice", ["OUTPUT_STATE", "zero", "four", "one"], ["HEAD"]),
    ]
    graph = helper.make_graph(nodes, "summing", wide, outputs, initializer=bounds)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    model_dir = write_model(repo, "summing", SUMMING)
    onnx.save(model, str(model_dir / "1" / "model.onnx"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_workers: int) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("wide-states")
    _write_summing(repo)
    write_model(repo, "echo", ECHO, ECHO_PY)
    with ServerProcess([repo], frontend_workers=frontend_workers) as process:
        yield process


def _send(
    client: httpclient.InferenceServerClient,
    model: str,
    sequence: int,
    value: int,
    start: bool,
    outputs: list[str] | None = None,
) -> httpclient.InferResult:
    tensor = httpclient.InferInput("INPUT", [1, WIDTH], "INT32")
    tensor.set_data_from_numpy(np.full((1, WIDTH), value, np.int32))
    asked = None if outputs is None else [httpclient.InferRequestedOutput(name) for name in outputs]
    return client.infer(model, [tensor], outputs=asked, sequence_id=sequence, sequence_start=start)


def _value(sequence: int, step: int) -> int:
    return 100 * sequence + step


def test_interleaved_sequences_keep_their_own_computed_state(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    for step in range(STEPS):
        for sequence in SEQUENCES:
            result = _send(client, "summing", sequence, _value(sequence, step), step == 0, ["HEAD"])
            total = sum(_value(sequence, k) for k in range(step + 1))
            assert result.as_numpy("HEAD").tolist() == [[total] * 4], (sequence, step)
    client.close()


def test_interleaved_sequences_keep_an_input_handed_back_as_their_state(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    for step in range(STEPS):
        for sequence in SEQUENCES:
            result = _send(client, "echo", sequence, _value(sequence, step), step == 0)
            previous = 0 if step == 0 else _value(sequence, step - 1)
            assert result.as_numpy("HEAD").tolist() == [[previous] * 4], (sequence, step)
    client.close()


def test_a_state_declared_an_output_is_answered_when_asked_for(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    first = _send(client, "summing", 7, 5, True, ["HEAD", "OUTPUT_STATE"])
    state = first.as_numpy("OUTPUT_STATE")
    assert state is not None and state.shape == (1, WIDTH) and (state == 5).all()
    only_head = _send(client, "summing", 7, 2, False, ["HEAD"])
    assert only_head.as_numpy("OUTPUT_STATE") is None and only_head.as_numpy("HEAD").tolist() == [[7] * 4]
    everything = _send(client, "summing", 7, 1, False)  # no outputs named: all the config declares
    assert {o["name"] for o in everything.get_response()["outputs"]} == {"HEAD", "OUTPUT_STATE"}
    assert (everything.as_numpy("OUTPUT_STATE") == 8).all()
    with pytest.raises(
        InferenceServerException, match="unexpected inference output 'OUTPUT_STATE' for model 'echo'"
    ):
        _send(client, "echo", 8, 1, True, ["OUTPUT_STATE"])
    client.close()
