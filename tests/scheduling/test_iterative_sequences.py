"""Request rescheduling and iterative sequences (``sequence_batching { iterative_sequence: true }``).

A Python model releases a request with ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` to have it run again
in a later batch (Triton's continuous batching).  Checked against Triton 2.51 side by side: a request
without a correlation ID is a sequence of its own, given an ID from 1 and the START flag on its first
run only; a sequence ends with the request's answer; every run counts in the statistics; a model whose
scheduler cannot take a request back fails it with Triton's message (Triton logs that message and
never answers the request); a response returned for a rescheduled request fails the execution.
Each model runs in a model process and in the server process, each server mode once.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import modes
from tests.support.models import write_model
from tests.support.server import ServerProcess

frontend_workers = modes.frontend_workers

#: Runs each request ``INPUT0[0]`` times (rescheduling it until then), sleeping ``INPUT0[1]`` ms per
#: execution; answers ``[correlation ID, then per run: flags, batch size]``.
RUNS_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.runs = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            wanted, sleep_ms = (int(v) for v in pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy().reshape(-1))
            key = request.correlation_id()
            runs = self.runs.setdefault(key, [])
            runs += [request.flags(), len(requests)]
            if len(runs) // 2 < wanted:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
            else:
                del self.runs[key]
                cid = key if isinstance(key, int) else -1
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([cid] + runs, np.int64))]))
        time.sleep(max(int(pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy().reshape(-1)[1]) for r in requests) / 1000)
        return responses
"""

#: Decoupled: ``INPUT0[0]`` responses, one per run, counting down to 0, the last with the final flag.
COUNTDOWN_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.left = {}

    def execute(self, requests):
        for request in requests:
            key = request.correlation_id()
            if key not in self.left:
                self.left[key] = int(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0])
            self.left[key] -= 1
            out = pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([self.left[key], request.flags()], np.int64))])
            sender = request.get_response_sender()
            if self.left[key] <= 0:
                del self.left[key]
                sender.send(out, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(out)
        return None
"""

#: Reschedules every request and still returns a response for it.
WRONG_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.zeros(1, np.int64))]) for _ in requests]
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: {batch}
input [{{ name: "INPUT0" data_type: TYPE_INT64 dims: [ {dims} ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_INT64 dims: [ -1 ] }}]
{extra}
"""

ITERATIVE = "sequence_batching { iterative_sequence: true }"
#: Four sequences at once on the one instance, batched oldest first with no delay.
CONTINUOUS = (
    "sequence_batching { iterative_sequence: true "
    "oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 0 } }"
)
DECOUPLED = "model_transaction_policy { decoupled: true }"
IN_THE_SERVER = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }'

#: name -> (model.py, max_batch_size, dims, config lines)
MODELS = {
    "runs": (RUNS_PY, 0, 2, ITERATIVE),
    "continuous": (RUNS_PY, 4, 2, CONTINUOUS),
    "countdown": (COUNTDOWN_PY, 0, 1, f"{ITERATIVE}\n{DECOUPLED}"),
    "plain": (RUNS_PY, 0, 2, ""),
    "batched": (RUNS_PY, 4, 2, "dynamic_batching { }"),
    "not_iterative": (RUNS_PY, 0, 2, "sequence_batching { }"),
    "wrong": (WRONG_PY, 0, 2, ITERATIVE),
}
PLACES = ["", "_in_server"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_workers: int) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("iterative")
    for name, (model_py, batch, dims, extra) in MODELS.items():
        for place in PLACES:
            lines = extra + ("\n" + IN_THE_SERVER if place else "")
            config = CONFIG.format(name=name + place, batch=batch, dims=dims, extra=lines)
            write_model(repo, name + place, config, model_py)
    with ServerProcess([repo], frontend_workers=frontend_workers) as served:
        yield served


def _runs(
    server: ServerProcess, model: str, wanted: int, sleep_ms: int = 0, batched: bool = False, **kwargs: object
) -> list[int]:
    data = np.array([[wanted, sleep_ms]] if batched else [wanted, sleep_ms], np.int64)
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), "INT64")
    tensor.set_data_from_numpy(data)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer(model, [tensor], client_timeout=30, **kwargs)  # type: ignore[arg-type]
    return [int(v) for v in result.as_numpy("OUTPUT0").reshape(-1)]


def _successes(server: ServerProcess, model: str) -> tuple[int, int, int]:
    with httpclient.InferenceServerClient(server.http_url) as client:
        stats = client.get_inference_statistics(model)["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"]), int(stats["execution_count"]), int(
        stats["inference_count"]
    )


@pytest.mark.parametrize("place", PLACES)
def test_a_request_without_a_correlation_id_runs_until_answered(server: ServerProcess, place: str) -> None:
    model = "runs" + place
    before = _successes(server, model)
    answer = _runs(server, model, 3)
    # its own sequence, ID'd from 1 upward: START on the first run only, one request per batch
    assert answer[1:] == [1, 1, 0, 1, 0, 1]
    assert answer[0] >= 1
    second = _runs(server, model, 1)
    assert second[1:] == [1, 1] and second[0] == answer[0] + 1
    after = _successes(server, model)
    assert tuple(a - b for a, b in zip(after, before, strict=True)) == (4, 4, 4)  # each run counts


@pytest.mark.parametrize("place", PLACES)
def test_a_sequence_is_one_request_and_ends_with_its_answer(server: ServerProcess, place: str) -> None:
    model = "runs" + place
    assert _runs(server, model, 2, sequence_id=77, sequence_start=True) == [77, 1, 1, 0, 1]
    # with END too it runs on (Triton 2.51 never answers it: its sequence ended at the first run)
    assert _runs(server, model, 2, sequence_id=78, sequence_start=True, sequence_end=True) == [78, 3, 1, 2, 1]
    with pytest.raises(InferenceServerException) as refused:
        _runs(server, model, 1, sequence_id=77)
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert refused.value.message() == (
        f"inference request for sequence 77 to model '{model}' must specify the START flag on the first "
        "request of the sequence"
    )


@pytest.mark.parametrize("place", PLACES)
def test_a_rescheduled_request_joins_the_next_batch_with_new_ones(server: ServerProcess, place: str) -> None:
    model = "continuous" + place
    answers: dict[str, list[int]] = {}

    def send(name: str, wanted: int) -> None:
        answers[name] = _runs(server, model, wanted, sleep_ms=600, batched=True)

    first = threading.Thread(target=send, args=("first", 2))
    first.start()
    time.sleep(0.2)  # the first request's first run has started and sleeps; the second one queues
    send("second", 1)
    first.join(30)
    # the first request's second run and the second request's only run shared one batch of two
    assert answers["first"][1:] == [1, 1, 0, 2]
    assert answers["second"][1:] == [1, 2]


@pytest.mark.parametrize("place", PLACES)
def test_a_decoupled_request_streams_one_response_per_run(server: ServerProcess, place: str) -> None:
    received: queue.Queue[object] = queue.Queue()
    tensor = grpcclient.InferInput("INPUT0", [1], "INT64")
    tensor.set_data_from_numpy(np.array([3], np.int64))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: received.put(error or result))
        client.async_stream_infer("countdown" + place, [tensor])
        answers = [received.get(timeout=30) for _ in range(3)]
        client.stop_stream()
    values = []
    for answer in answers:
        assert not isinstance(answer, InferenceServerException), answer
        response = answer.get_response()  # type: ignore[attr-defined]
        values.append(
            ([int(v) for v in answer.as_numpy("OUTPUT0")], response.parameters["triton_final_response"].bool_param)  # type: ignore[attr-defined]
        )
    assert values == [([2, 1], False), ([1, 0], False), ([0, 0], True)]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("model", ["plain", "batched", "not_iterative"])
def test_a_model_that_cannot_take_a_request_back_fails_it_with_tritons_message(
    server: ServerProcess, model: str, place: str
) -> None:
    batched = model == "batched"
    kwargs = {"sequence_id": 5, "sequence_start": True} if model == "not_iterative" else {}
    with pytest.raises(InferenceServerException) as failed:
        _runs(server, model + place, 2, batched=batched, **kwargs)
    message = (
        "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
        "configured to handle such a flag."
    )
    assert failed.value.status() == "StatusCode.INTERNAL"
    assert failed.value.message() == message
    assert f"Failed to release request: {message}" in server.log()
    # and it serves on (its last run: the flags and the batch size)
    assert _runs(server, model + place, 1, batched=batched, **kwargs)[-2:] == [1 if kwargs else 0, 1]


@pytest.mark.parametrize("place", PLACES)
def test_a_response_for_a_rescheduled_request_fails_the_execution(server: ServerProcess, place: str) -> None:
    model = "wrong" + place
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("INPUT0", [2], "INT64")
        tensor.set_data_from_numpy(np.array([1, 0], np.int64))
        with pytest.raises(InferenceServerException) as failed:
            client.infer(model, [tensor])
    assert failed.value.status() == "500"
    assert failed.value.message() == (
        f"Failed to process the request(s) for model '{model}_0', message: Expected a None object in "
        "the execute function return list for reschduled request, found type "
        "'<class 'naiad.backends.python.pb_utils.InferenceResponse'>'."
    )
