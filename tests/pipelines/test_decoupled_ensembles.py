"""Ensembles whose steps include decoupled models: each response of a decoupled step flows through the
steps after it, and the ensemble, decoupled itself, streams one response per path that reaches its
outputs, then its final flag (gRPC ModelStreamInfer and HTTP generate_stream); a failing step ends
the request with an error naming the step while the stream goes on; the unary endpoints refuse it; and
``max_inflight_requests`` holds a producer's responses back without losing any, counted over all the
ensemble's requests."""

from __future__ import annotations

import json
import queue
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.pipelines.models import INT32_1, ensemble, step, tensors
from tests.support.models import write_model
from tests.support.server import ServerProcess

#: One answer to a streamed request: its outputs (flattened), or the message of the error that ended it.
Answer = dict[str, list[int]] | str


class _Stream:
    """One gRPC stream; :meth:`ask` sends a request and reads its answers up to its final flag."""

    def __init__(self, client: grpcclient.InferenceServerClient) -> None:
        self._client = client
        self._answers: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
        client.start_stream(callback=lambda result, error: self._answers.put((result, error)))

    def ask(self, model: str, inputs: list[grpcclient.InferInput], request_id: str) -> list[Answer]:
        self._client.async_stream_infer(
            model, inputs, request_id=request_id, enable_empty_final_response=True
        )
        answers: list[Answer] = []
        while True:
            result, error = self._answers.get(timeout=20)
            if error is not None:
                answers.append(error.message())
                return answers
            response = result.get_response()
            assert response.id == request_id
            if response.outputs:
                answers.append(
                    {o.name: result.as_numpy(o.name).reshape(-1).tolist() for o in response.outputs}
                )
            if response.parameters["triton_final_response"].bool_param:
                return answers


def _values(answers: list[Answer], name: str) -> list[int]:
    """Every value of output ``name``, across the answers (none of which may be an error)."""
    values: list[int] = []
    for answer in answers:
        assert isinstance(answer, dict), answer
        values += answer[name]
    return values


@pytest.fixture
def stream(server: ServerProcess) -> Iterator[_Stream]:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        yield _Stream(client)
        client.stop_stream()


def _inputs(module: Any = grpcclient, **arrays: np.ndarray) -> list[Any]:
    inputs = []
    for name, array in arrays.items():
        datatype = "INT32" if array.dtype == np.int32 else "UINT32"
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def _repeat(values: list[int], delay_ms: int = 0, module: Any = grpcclient) -> list[Any]:
    """repeat_int32's inputs: one response per value, ``delay_ms`` apart."""
    return _inputs(
        module,
        IN=np.array(values, dtype=np.int32),
        DELAY=np.full(len(values), delay_ms, dtype=np.uint32),
        WAIT=np.array([0], dtype=np.uint32),
    )


def test_each_response_of_the_decoupled_step_flows_through_the_next_step(stream: _Stream) -> None:
    assert stream.ask("repeat_then_square", _repeat([1, 2, 3], delay_ms=5), "r1") == [
        {"OUT": [1], "IDX": [0]},
        {"OUT": [4], "IDX": [1]},
        {"OUT": [9], "IDX": [2]},
    ]
    assert stream.ask("repeat_then_square", _repeat([]), "r2") == []  # no response, only the final flag


def test_two_decoupled_steps_in_a_row(stream: _Stream) -> None:
    """repeat_int32 sends 2 then 3; square_int32 answers n with n responses; int_square squares each."""
    answers = stream.ask("repeat_square_square", _repeat([2, 3]), "rss")
    assert sorted(_values(answers, "OUT")) == [4, 4, 9, 9, 9]


def test_a_failing_step_ends_the_request_with_its_name_and_the_stream_goes_on(stream: _Stream) -> None:
    assert stream.ask("repeat_then_square", _repeat([2, -3, 4]), "bad") == [
        {"OUT": [4], "IDX": [0]},
        "in ensemble 'repeat_then_square', negative input",
    ]
    assert stream.ask("repeat_then_square", _repeat([5]), "good") == [{"OUT": [25], "IDX": [0]}]


def test_unary_inference_refuses_the_decoupled_ensemble(server: ServerProcess) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        http.infer("repeat_then_square", _repeat([1], module=httpclient))
    assert (info.value.status(), info.value.message()) == (
        "501",
        "HTTP end point doesn't support models with decoupled transaction policy",
    )
    http.close()
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as client,
        pytest.raises(InferenceServerException) as info,
    ):
        client.infer("repeat_then_square", _repeat([1]))
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    assert info.value.message() == "ModelInfer RPC doesn't support models with decoupled transaction policy"


def test_the_configuration_says_whether_an_ensemble_is_decoupled(server: ServerProcess) -> None:
    """As Triton fills it at load: decoupled exactly when a step model is."""
    http = httpclient.InferenceServerClient(server.http_url)
    assert http.get_model_config("repeat_then_square")["model_transaction_policy"] == {"decoupled": True}
    assert http.get_model_config("add_sub_mul")["model_transaction_policy"] == {"decoupled": False}
    http.close()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        config = client.get_model_config("repeat_then_square").config
        assert config.model_transaction_policy.decoupled


def test_generate_stream_sends_each_answer_as_an_event(server: ServerProcess) -> None:
    body = json.dumps({"IN": [1, 2], "DELAY": [0, 0], "WAIT": 0}).encode()
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/models/repeat_then_square/generate_stream", data=body, method="POST"
    )
    with urllib.request.urlopen(request, timeout=20) as response:
        chunks = response.read().split(b"\n\n")
    events = [json.loads(chunk.removeprefix(b"data: ")) for chunk in chunks if chunk]
    # (each response's parameters too, as Triton writes them: an ensemble's carry its sequence fields)
    sequence = {"sequence_id": 0, "sequence_start": False, "sequence_end": False}
    assert events == [
        {"model_name": "repeat_then_square", "model_version": "1", **sequence, "OUT": 1, "IDX": 0},
        {"model_name": "repeat_then_square", "model_version": "1", **sequence, "OUT": 4, "IDX": 1},
    ]


def test_max_inflight_requests_holds_responses_back_without_losing_any(stream: _Stream) -> None:
    """counter sends 8 responses at once; each goes to a probe that batches what is in flight together
    (waiting up to 100 ms) and reports its batch size.  Uncapped, the probe batches them; with
    ``max_inflight_requests: 1`` it can never hold two at once, so every batch is of one, whatever
    the timing, and every response still arrives, in order."""
    n = np.array([8], dtype=np.int32)
    uncapped = stream.ask("counted", _inputs(N=n), "free")
    assert sorted(_values(uncapped, "K")) == list(range(8))
    assert max(_values(uncapped, "BATCH")) > 1

    capped = stream.ask("counted_capped", _inputs(N=n), "capped")
    assert capped == [{"K": [k], "BATCH": [1]} for k in range(8)]


def test_max_inflight_requests_is_shared_by_all_requests_of_the_ensemble(server: ServerProcess) -> None:
    """As current Triton counts it, the cap holds across requests, in a plain ensemble too: eight
    clients' requests at once reach the probe together uncapped (it batches them), and one at a time
    with ``max_inflight_requests: 1``, each still answered with its own value.  The load says so."""
    assert server.logged("Ensemble model 'probed_capped' configured with max_inflight_requests: 1")
    assert "Ensemble model 'probed' configured" not in server.log()

    def ask_all(model: str) -> list[tuple[int, int]]:
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
            for k in range(8):
                inputs = _inputs(K=np.array([[k]], dtype=np.int32))
                client.async_infer(model, inputs, lambda result, error: answers.put((result, error)))
            got = []
            for _ in range(8):
                result, error = answers.get(timeout=20)
                assert error is None, error
                got.append((int(result.as_numpy("K_OUT")[0, 0]), int(result.as_numpy("BATCH")[0, 0])))
        return sorted(got)

    uncapped = ask_all("probed")
    assert [k for k, _ in uncapped] == list(range(8))
    assert max(batch for _, batch in uncapped) > 1
    assert ask_all("probed_capped") == [(k, 1) for k in range(8)]


#: OUT = IN * IN, answered as its configuration says: returned by ``execute``, or sent (decoupled).
FLIP_PY = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * x)]))
        if not self.decoupled:
            return responses
        for request, response in zip(requests, responses):
            request.get_response_sender().send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def _flip_config(decoupled: bool) -> dict[str, Any]:
    return {
        "name": "flip",
        "backend": "python",
        "input": [{"name": "IN", "data_type": "TYPE_INT32", "dims": [1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [1]}],
        "model_transaction_policy": {"decoupled": decoupled},
    }


def test_a_step_model_that_changes_its_policy_holds_the_ensemble_until_it_is_loaded_again(
    tmp_path: Path, frontend_workers: int
) -> None:
    """The ensemble's stages and its own policy are fixed when it loads: once a step model is reloaded
    decoupled, the ensemble is UNAVAILABLE with the reason, until it is loaded again (as decoupled)."""
    (tmp_path / "flip" / "1").mkdir(parents=True)
    (tmp_path / "flip" / "1" / "model.py").write_text(FLIP_PY)
    (tmp_path / "flip" / "config.pbtxt").write_text('name: "flip" backend: "python"')
    write_model(
        tmp_path,
        "via_flip",
        ensemble(
            "via_flip",
            step("flip", {"IN": "N"}, {"OUT": "OUT"}),
            tensors("N", spec=INT32_1),
            tensors("OUT", spec=INT32_1),
        ),
    )
    n = np.array([3], dtype=np.int32)
    with ServerProcess(
        [tmp_path], ["--model-control-mode=explicit"], frontend_workers=frontend_workers
    ) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        http.load_model("flip", config=json.dumps(_flip_config(False)))
        http.load_model("via_flip")
        assert http.get_model_config("via_flip")["model_transaction_policy"] == {"decoupled": False}
        assert http.infer("via_flip", _inputs(httpclient, N=n)).as_numpy("OUT").tolist() == [9]

        http.load_model("flip", config=json.dumps(_flip_config(True)))
        rows = {row["name"]: row for row in http.get_model_repository_index()}
        assert (rows["via_flip"]["state"], rows["via_flip"]["reason"]) == (
            "UNAVAILABLE",
            "in ensemble via_flip, step 0 model flip is now decoupled: load the ensemble again",
        )

        http.load_model("via_flip")
        assert http.get_model_config("via_flip")["model_transaction_policy"] == {"decoupled": True}
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            assert _Stream(client).ask("via_flip", _inputs(N=n), "f") == [{"OUT": [9]}]
            client.stop_stream()
        http.close()


def test_each_answer_carries_the_sequence_id_and_flags(server: ServerProcess) -> None:
    """As Triton 2.51 answers a decoupled ensemble (checked side by side): on every answer with outputs."""
    answers: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        client.async_stream_infer(
            "repeat_then_square",
            _repeat([1, 2]),
            sequence_id=9,
            sequence_start=True,
            enable_empty_final_response=True,
        )
        seen = []
        while True:
            result, error = answers.get(timeout=20)
            assert error is None, error
            response = result.get_response()
            parameters = response.parameters
            if response.outputs:
                seen.append(
                    (
                        parameters["sequence_id"].int64_param,
                        parameters["sequence_start"].bool_param,
                        parameters["sequence_end"].bool_param,
                    )
                )
            else:  # the final flag alone: no outputs, no sequence parameters
                assert "sequence_id" not in parameters
            if parameters["triton_final_response"].bool_param:
                break
        client.stop_stream()
    assert seen == [(9, True, False), (9, True, False)]
