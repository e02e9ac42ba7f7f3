"""A decoupled model in a model process gets its executions sent ahead: the next request of a burst
is in the model process while the execution before it still runs, instead of waiting in the server
for that execution's results to come back.

``ahead`` reports, per request, whether the next execution had reached its model process (the
process's reader thread had it waiting) while this request's ``execute`` ran: ``INPUT0 = [action]``,
action 0 answers at once, 1 waits up to 10 s for the next execution to be there, 2 does the same and
then crashes the process (so the execution sent ahead dies with it, and only that one), 3 does the
same and then hangs past the model's execution timeout (``ahead_hangs``: 1.5 s), 4 does the same and
then takes 0.2 s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.models import write_model
from tests.support.server import ServerProcess

ANSWER, WAIT, CRASH, HANG, SLOW = 0, 1, 2, 3, 4

AHEAD_PY = """
import ctypes
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        # the model process's end of its socket: its reader thread queues the executions that came
        work = pb_utils.SERVICES.get().bls._channel._work
        for request in requests:
            action = int(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0])
            seen = 0
            if action:
                deadline = time.monotonic() + 10
                while work.empty() and time.monotonic() < deadline:
                    time.sleep(0.002)
                seen = int(not work.empty())
            if action == 2 and seen:
                ctypes.string_at(0)
            if action == 3 and seen:
                time.sleep(60)
            if action == 4:
                time.sleep(0.2)
            out = pb_utils.Tensor("OUTPUT0", np.array([seen], np.int64))
            request.get_response_sender().send(
                pb_utils.InferenceResponse([out]), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )
        return None
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_INT64 dims: [ 1 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 1 ] }}]
model_transaction_policy {{ decoupled: true }}
{extra}
"""
TIMEOUT = 'parameters { key: "NAIAD_EXECUTION_TIMEOUT_SECONDS" value: { string_value: "1.5" } }'
PAIR = "instance_group [{ kind: KIND_CPU count: 2 }]"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("ahead")
    write_model(repo, "ahead", CONFIG.format(name="ahead", extra=""), AHEAD_PY)
    write_model(repo, "ahead_hangs", CONFIG.format(name="ahead_hangs", extra=TIMEOUT), AHEAD_PY)
    write_model(repo, "ahead_pair", CONFIG.format(name="ahead_pair", extra=PAIR), AHEAD_PY)
    with ServerProcess([repo]) as served:
        yield served


def _burst(server: ServerProcess, actions: list[int], model: str = "ahead") -> list[object]:
    """Send one request per action, in order, on one stream; their answers (a response or an error),
    in the order of the requests (an error, which names no request, in the order received)."""
    answers: list[object] = []
    over = threading.Event()

    def received(result: object, error: object) -> None:
        answers.append(error if error is not None else result)
        if len(answers) == len(actions):
            over.set()

    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        client.start_stream(callback=received)
        for index, action in enumerate(actions):
            tensor = grpcclient.InferInput("INPUT0", [1], "INT64")
            tensor.set_data_from_numpy(np.array([action], dtype=np.int64))
            client.async_stream_infer(model, [tensor], request_id=str(index))
        assert over.wait(30)
    finally:
        client.stop_stream()
        client.close()

    def order(answer: object) -> int:
        return -1 if isinstance(answer, InferenceServerException) else int(answer.get_response().id)  # type: ignore[attr-defined]

    return sorted(answers, key=order)


def _seen(answer: object) -> int:
    assert not isinstance(answer, InferenceServerException), answer
    return int(answer.as_numpy("OUTPUT0")[0])  # type: ignore[attr-defined]


def _stat(server: ServerProcess, name: str, field: str = "count") -> int:
    """A figure of the model's statistics: ``name`` (success, fail, compute_infer) and its count or ns."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        stats = client.get_inference_statistics("ahead", as_json=True)["model_stats"][0]
    finally:
        client.close()
    return int(stats["inference_stats"].get(name, {}).get(field, 0))


def _count(server: ServerProcess, outcome: str, expected: int) -> int:
    """How many requests ended with ``outcome``, once that is ``expected`` (or after 10 s): a
    response can reach the client before the results of its execution reach the statistics."""
    deadline = time.monotonic() + 10
    while (count := _stat(server, outcome)) != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return count


def test_the_next_request_reaches_the_model_process_while_the_execution_before_it_runs(
    server: ServerProcess,
) -> None:
    before = _stat(server, "success")
    answers = _burst(server, [WAIT, WAIT, ANSWER])
    # each waiting execution found the next one in its process: it was sent without waiting for
    # the results of the one before (the last one had nothing after it to wait for)
    assert [_seen(answer) for answer in answers] == [1, 1, 0]
    assert _count(server, "success", before + 3) == before + 3


def test_each_of_two_instances_gets_the_next_execution_while_its_own_runs(server: ServerProcess) -> None:
    # the least busy instance takes each execution: the first two run at once, one in each process,
    # and the next two are each sent ahead to the process of one of them while it still runs.  (SLOW:
    # each of the first two holds its instance 0.2 s after the next execution reached it, so the fourth
    # request finds the first instance still holding two however late the client sends it; with WAIT
    # the first one ended as soon as the third arrived, and a fourth sent a moment later under load
    # went to that instance, then idle, leaving the second one waiting for nothing)
    answers = _burst(server, [SLOW, SLOW, ANSWER, ANSWER], "ahead_pair")
    assert [_seen(answer) for answer in answers] == [1, 1, 0, 0]


def test_executions_sent_ahead_count_only_their_own_compute_time(server: ServerProcess) -> None:
    # one instance runs one execution at a time, so its executions' compute times add up to no more
    # than the time the burst took, though each was sent while the ones before it still ran
    computed = _stat(server, "compute_infer", "ns")
    done = _stat(server, "success") + 4
    began = time.monotonic_ns()
    answers = _burst(server, [SLOW, SLOW, SLOW, ANSWER])
    assert _count(server, "success", done) == done
    took = time.monotonic_ns() - began
    assert [_seen(answer) for answer in answers] == [1, 1, 1, 0]  # each was sent while the one before ran
    assert 0 < _stat(server, "compute_infer", "ns") - computed <= took


def test_a_crash_fails_the_execution_sent_ahead_that_it_held_and_the_next_requests_are_served(
    server: ServerProcess,
) -> None:
    failed = _stat(server, "fail")
    crashed, held = _burst(server, [CRASH, ANSWER])
    assert _count(server, "fail", failed + 2) == failed + 2
    for error in (crashed, held):
        assert isinstance(error, InferenceServerException), error
        assert "Stub process 'ahead_0' is not healthy." in str(error.message())
        assert "its model process stopped while executing: killed by signal 11 (SIGSEGV)" in str(
            error.message()
        )
    _served_again(server, "ahead")


def test_an_execution_past_the_timeout_fails_with_the_one_sent_ahead_behind_it(server: ServerProcess) -> None:
    hung, held = _burst(server, [HANG, ANSWER], "ahead_hangs")
    for error in (hung, held):
        assert isinstance(error, InferenceServerException), error
        assert "Stub process 'ahead_hangs_0' is not healthy." in str(error.message())
        assert "ran past the model's execution timeout (NAIAD_EXECUTION_TIMEOUT_SECONDS 1.5)" in str(
            error.message()
        )
    _served_again(server, "ahead_hangs")


def _served_again(server: ServerProcess, model: str) -> None:
    """The restarted process serves the next requests (those that arrive while it restarts fail
    with the restart's reason)."""
    for _ in range(100):
        (answer,) = _burst(server, [ANSWER], model)
        if not isinstance(answer, InferenceServerException):
            break
        assert "is restarting" in str(answer.message()), answer
        threading.Event().wait(0.1)
    assert _seen(answer) == 0
