"""A decoupled model that answers from its own threads: its instance is free once ``execute`` returns.

As in Triton's Python backend, the next execution runs while the responses of earlier requests keep
streaming, in a model process as in the server process.  ``streams`` answers ``INPUT0 = [action,
round]`` from a thread: a first response at once, then a last one (with the final flag) carrying how
many requests of the round had sent their first response by then; it waits up to 10 s for the round's
second request, which reaches ``execute`` only if the first one's execution has ended.  ``action`` 1 crashes
the model process instead of sending the last response.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.models import write_model
from tests.support.server import ServerProcess

SERVE, SEGFAULT = 0, 1

STREAMS_PY = """
import collections
import ctypes
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.started = collections.Counter()
        self.changed = threading.Condition()

    def execute(self, requests):
        for request in requests:
            action, round_ = (int(v) for v in pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy())
            threading.Thread(target=self.answer, args=(request, action, round_)).start()
        return None

    def answer(self, request, action, round_):
        sender = request.get_response_sender()
        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([0], np.int64))]))
        with self.changed:
            self.started[round_] += 1
            self.changed.notify_all()
            self.changed.wait_for(lambda: self.started[round_] >= 2, timeout=10)
            started = self.started[round_]
        if action == 1:
            ctypes.string_at(0)  # a crash once the next execution came: this one's execute has returned
        out = pb_utils.Tensor("OUTPUT0", np.array([started], np.int64))
        sender.send(pb_utils.InferenceResponse([out]), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_INT64 dims: [ 2 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 1 ] }}]
model_transaction_policy {{ decoupled: true }}
{extra}
"""

IN_THE_SERVER = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }'
MODELS = {"streams": "", "streams_in_server": IN_THE_SERVER}
_rounds = itertools.count(1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("streams")
    for name, extra in MODELS.items():
        write_model(repo, name, CONFIG.format(name=name, extra=extra), STREAMS_PY)
    with ServerProcess([repo]) as served:
        yield served


class Stream:
    """One gRPC stream with one request and what it received, in order."""

    def __init__(self, server: ServerProcess) -> None:
        self.answers: list[object] = []
        self.started = threading.Event()
        self.over = threading.Event()
        self._client = grpcclient.InferenceServerClient(server.grpc_url)

    def send(self, model: str, action: int, round_: int) -> None:
        self._client.start_stream(callback=self._received)
        tensor = grpcclient.InferInput("INPUT0", [2], "INT64")
        tensor.set_data_from_numpy(np.array([action, round_], dtype=np.int64))
        self._client.async_stream_infer(model, [tensor])

    def _received(self, result: object, error: object) -> None:
        answer = error if error is not None else result
        self.answers.append(answer)
        self.started.set()
        if error is not None or len(self.answers) == 2:
            self.over.set()

    def close(self) -> None:
        self._client.stop_stream()
        self._client.close()


def _value(answer: object) -> int:
    assert not isinstance(answer, InferenceServerException), answer
    return int(answer.as_numpy("OUTPUT0")[0])  # type: ignore[attr-defined]


@pytest.mark.parametrize("model", list(MODELS))
def test_the_next_execution_runs_while_earlier_streams_are_still_open(
    server: ServerProcess, model: str
) -> None:
    first, second = Stream(server), Stream(server)
    round_ = next(_rounds)
    try:
        first.send(model, SERVE, round_)
        second.send(model, SERVE, round_)
        assert first.over.wait(30) and second.over.wait(30)
    finally:
        first.close()
        second.close()
    # both streams had their first response before either had its last: the second request's
    # execution did not wait for the first request's stream to end
    assert [_value(answer) for answer in first.answers] == [0, 2]
    assert [_value(answer) for answer in second.answers] == [0, 2]


def test_a_crash_after_execute_returned_ends_the_open_stream_with_the_reason(server: ServerProcess) -> None:
    stream, other = Stream(server), Stream(server)
    round_ = next(_rounds)
    try:
        stream.send("streams", SEGFAULT, round_)
        # its first response came from its thread, so the model process has its execution: the
        # other request's execution comes after it (and after its results: the process sends them
        # before it runs the next), and only then does the crash come
        assert stream.started.wait(30)
        other.send("streams", SERVE, round_)
        assert stream.over.wait(30) and other.over.wait(30)
    finally:
        stream.close()
        other.close()
    first, error = stream.answers
    assert _value(first) == 0  # what it sent before it crashed arrived
    assert isinstance(error, InferenceServerException)
    assert "Stub process 'streams_0' is not healthy." in str(error.message())
    assert "its model process stopped while streaming: killed by signal 11 (SIGSEGV)" in str(error.message())
