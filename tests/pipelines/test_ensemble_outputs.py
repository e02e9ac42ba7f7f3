"""What an ensemble answers with, as Triton 2.51 answers (checked side by side, and by NVIDIA's
qa/L0_simple_ensemble and L0_optional_input): only the steps the requested outputs need run; an
output a composing model leaves out, or an optional input the request leaves out, is absent (the
steps reading it run without it, and the answer leaves it out); the answer carries the request's
sequence ID and flags; and a non-batching ensemble runs batching models (its tensors get and lose a
batch dimension of 1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.pipelines.models import ensemble, step, tensors
from tests.support.models import write_model
from tests.support.server import ServerProcess

X = np.array([1, 2, 3, 4], dtype=np.float32)

SHIFT_PY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.by = {by}

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + self.by)]
            )
            for r in requests
        ]
"""

#: Answers OUT0 = IN and leaves OUT1, which its config declares, out (qa's partial_add_sub does so).
HALF_PY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT0", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""


#: OUT = IN (zeros when it is left out) + IN2 (100 when it is left out): both inputs optional.
OPTIONAL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for r in requests:
            a, b = (pb_utils.get_input_tensor_by_name(r, name) for name in ("IN", "IN2"))
            value = (np.zeros(4, np.float32) if a is None else a.as_numpy()) + (100 if b is None else b.as_numpy())
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value.astype(np.float32))]))
        return answers
"""

OPTIONAL_IN = "data_type: TYPE_FP32 dims: [ 4 ] optional: true"


def _python_config(name: str, outputs: str, inputs: str = tensors("IN")) -> str:
    return f"""
    name: "{name}"
    backend: "python"
    input [{inputs}]
    output [{outputs}]
    instance_group [{{ kind: KIND_CPU }}]
    """


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("ensemble_outputs")
    write_model(repo, "plus", _python_config("plus", tensors("OUT")), SHIFT_PY.format(by=1))
    write_model(repo, "minus", _python_config("minus", tensors("OUT")), SHIFT_PY.format(by=-1))
    write_model(repo, "half", _python_config("half", tensors("OUT0", "OUT1")), HALF_PY)
    both = step("plus", {"IN": "X"}, {"OUT": "P"}) + ", " + step("minus", {"IN": "X"}, {"OUT": "M"})
    write_model(repo, "both", ensemble("both", both, tensors("X"), tensors("P", "M")))
    partial = step("half", {"IN": "X"}, {"OUT0": "KEPT", "OUT1": "LEFT_OUT"})
    write_model(repo, "partial", ensemble("partial", partial, tensors("X"), tensors("KEPT", "LEFT_OUT")))
    needed = (
        step("half", {"IN": "X"}, {"OUT0": "KEPT", "OUT1": "T"})
        + ", "
        + step("plus", {"IN": "T"}, {"OUT": "Y"})
    )
    write_model(
        repo, "partial_needed", ensemble("partial_needed", needed, tensors("X"), tensors("KEPT", "Y"))
    )
    optional_inputs = tensors("IN", "IN2", spec=OPTIONAL_IN)
    write_model(repo, "optional", _python_config("optional", tensors("OUT"), optional_inputs), OPTIONAL_PY)
    given = step("optional", {"IN": "X", "IN2": "Z"}, {"OUT": "Y"})
    ensemble_inputs = tensors("X") + ", " + tensors("Z", spec=OPTIONAL_IN)
    write_model(repo, "optional_input", ensemble("optional_input", given, ensemble_inputs, tensors("Y")))
    connecting = (
        step("half", {"IN": "X"}, {"OUT0": "KEPT", "OUT1": "T"})
        + ", "
        + step("optional", {"IN": "KEPT", "IN2": "T"}, {"OUT": "Y"})
    )
    write_model(repo, "connecting", ensemble("connecting", connecting, tensors("X"), tensors("Y")))
    batched = _python_config("batched_plus", tensors("OUT")) + "max_batch_size: 4\n"
    write_model(repo, "batched_plus", batched, SHIFT_PY.format(by=1))
    over = step("batched_plus", {"IN": "X"}, {"OUT": "Y"})
    write_model(repo, "unbatched", ensemble("unbatched", over, tensors("X"), tensors("Y")))
    chain = ", ".join(
        step(model, {"IN": source}, {"OUT": target})
        for model, source, target in (
            ("plus", "X", "S1"), ("minus", "X", "D1"), ("plus", "S1", "S2"), ("minus", "D1", "D2"),
            ("plus", "S2", "EXTRA_LONG_NAME"),
        )
    )
    many = tensors("S1", "D1", "S2", "D2", "EXTRA_LONG_NAME")
    write_model(repo, "many_outputs", ensemble("many_outputs", chain, tensors("X"), many))
    return repo


@pytest.fixture
def server(repo: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    with ServerProcess([repo], ["--log-verbose=1"], frontend_workers=frontend_workers) as process:
        yield process


def _inputs() -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput("X", [4], "FP32")
    tensor.set_data_from_numpy(X)
    return [tensor]


def _successes(client: httpclient.InferenceServerClient, model: str) -> int:
    stats = client.get_inference_statistics(model)["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"])


def test_only_the_steps_the_requested_outputs_need_run(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    result = client.infer("both", _inputs(), outputs=[httpclient.InferRequestedOutput("P")])
    assert [o["name"] for o in result.get_response()["outputs"]] == ["P"]
    np.testing.assert_array_equal(result.as_numpy("P"), X + 1)
    assert (_successes(client, "plus"), _successes(client, "minus")) == (1, 0)
    result = client.infer("both", _inputs())  # all outputs: both steps
    np.testing.assert_array_equal(result.as_numpy("M"), X - 1)
    assert (_successes(client, "plus"), _successes(client, "minus")) == (2, 1)
    assert _successes(client, "both") == 2
    client.close()


def test_the_answer_carries_the_sequence_id_and_flags(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    plain = client.infer("both", _inputs()).get_response()
    assert plain["parameters"] == {"sequence_id": 0, "sequence_start": False, "sequence_end": False}
    flagged = client.infer("both", _inputs(), sequence_id=5, sequence_start=True, sequence_end=True)
    assert flagged.get_response()["parameters"] == {
        "sequence_id": 5,
        "sequence_start": True,
        "sequence_end": True,
    }
    assert "parameters" not in client.infer("plus", [_one("IN")]).get_response()  # a plain model's: none
    client.close()
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
        tensor = grpcclient.InferInput("X", [4], "FP32")
        tensor.set_data_from_numpy(X)
        answer = grpc_client.infer("both", [tensor], sequence_id=7, sequence_start=True)
        parameters = answer.get_response().parameters
        assert parameters["sequence_id"].int64_param == 7
        assert (parameters["sequence_start"].bool_param, parameters["sequence_end"].bool_param) == (
            True,
            False,
        )


def _one(name: str) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, [4], "FP32")
    tensor.set_data_from_numpy(X)
    return tensor


def test_an_output_a_composing_model_leaves_out_is_left_out(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    result = client.infer("partial", _inputs())
    assert [o["name"] for o in result.get_response()["outputs"]] == ["KEPT"]
    np.testing.assert_array_equal(result.as_numpy("KEPT"), X)
    assert server.logged("Composing models did not output tensor LEFT_OUT")
    only = client.infer("partial", _inputs(), outputs=[httpclient.InferRequestedOutput("LEFT_OUT")])
    assert only.get_response() == {"model_name": "partial", "model_version": "1", "outputs": []}
    client.close()


def test_an_output_left_out_that_a_later_step_needs_fails_that_step(server: ServerProcess) -> None:
    """The step runs without it, and its model refuses the request as Triton 2.51's does (checked)."""
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        client.infer("partial_needed", _inputs())
    assert info.value.status() == "400"
    assert info.value.message() == (
        "in ensemble 'partial_needed', [request id: <id_unknown>] expected 1 inputs "
        "but got 0 inputs for model 'plus'. Got input(s) [], but missing required input(s) ['IN']. "
        "Please provide all required input(s)."
    )
    np.testing.assert_array_equal(client.infer("both", _inputs()).as_numpy("P"), X + 1)  # others serve on
    client.close()


def test_an_optional_input_left_out_reaches_the_step_left_out(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    np.testing.assert_array_equal(client.infer("optional_input", _inputs()).as_numpy("Y"), X + 100)
    z = httpclient.InferInput("Z", [4], "FP32")
    z.set_data_from_numpy(X * 10)
    np.testing.assert_array_equal(client.infer("optional_input", [*_inputs(), z]).as_numpy("Y"), X * 11)
    client.close()


def test_an_output_left_out_reaches_an_optional_input_left_out(server: ServerProcess) -> None:
    """``half`` leaves its OUT1 out; the next step's IN2, which it feeds, is optional."""
    client = httpclient.InferenceServerClient(server.http_url)
    np.testing.assert_array_equal(client.infer("connecting", _inputs()).as_numpy("Y"), X + 100)
    client.close()


def test_a_non_batching_ensemble_runs_a_batching_model(server: ServerProcess) -> None:
    """The ensemble's [4] goes to the model as [1, 4] (its dims with a batch of 1) and comes back [4]."""
    client = httpclient.InferenceServerClient(server.http_url)
    result = client.infer("unbatched", _inputs())
    assert result.get_response()["outputs"][0]["shape"] == [4]
    np.testing.assert_array_equal(result.as_numpy("Y"), X + 1)
    direct = client.infer("batched_plus", [_batched("IN")])  # the model itself wants the batch dimension
    np.testing.assert_array_equal(direct.as_numpy("OUT"), [X + 1])
    client.close()


def _batched(name: str) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, [1, 4], "FP32")
    tensor.set_data_from_numpy(X.reshape(1, 4))
    return tensor


def test_the_outputs_come_in_the_order_tritons_scheduler_keeps_them(server: ServerProcess) -> None:
    # (Triton 2.51 answers these five in this order, checked side by side: its scheduler keeps an
    # ensemble's outputs in a std::unordered_map, see naiad.core.map_order)
    order = ["D2", "S2", "D1", "EXTRA_LONG_NAME", "S1"]
    with httpclient.InferenceServerClient(server.http_url) as client:
        answer = client.infer("many_outputs", _inputs()).get_response()
        assert [output["name"] for output in answer["outputs"]] == order
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        tensor = grpcclient.InferInput("X", [4], "FP32")
        tensor.set_data_from_numpy(X)
        result = grpc.infer("many_outputs", [tensor])
        assert [output.name for output in result.get_response().outputs] == order
        np.testing.assert_array_equal(result.as_numpy("EXTRA_LONG_NAME"), X + 3)
