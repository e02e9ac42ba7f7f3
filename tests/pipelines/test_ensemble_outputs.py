"""What an ensemble answers with, as Triton 2.51 answers (checked side by side, and by NVIDIA's
qa/L0_simple_ensemble): only the steps the requested outputs need run, an output a composing model
leaves out is left out of the answer, the answer carries the request's sequence ID and flags, and a
non-batching ensemble runs batching models (its tensors get and lose a batch dimension of 1)."""

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


def _python_config(name: str, outputs: str) -> str:
    return f"""
    name: "{name}"
    backend: "python"
    input [{tensors("IN")}]
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
    batched = _python_config("batched_plus", tensors("OUT")) + "max_batch_size: 4\n"
    write_model(repo, "batched_plus", batched, SHIFT_PY.format(by=1))
    over = step("batched_plus", {"IN": "X"}, {"OUT": "Y"})
    write_model(repo, "unbatched", ensemble("unbatched", over, tensors("X"), tensors("Y")))
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


def test_an_output_left_out_that_a_later_step_needs_fails_the_request(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        client.infer("partial_needed", _inputs())
    assert info.value.message() == (
        "in ensemble 'partial_needed', step 0 (model 'half'): the model did not produce output 'OUT1'"
    )
    np.testing.assert_array_equal(client.infer("both", _inputs()).as_numpy("P"), X + 1)  # others serve on
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
