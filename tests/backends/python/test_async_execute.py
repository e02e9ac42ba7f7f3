"""``async def execute`` as Triton's stub runs it (python_backend 24.04+), checked side by side with
Triton 2.51: the model's coroutines run on an event loop of its own that runs on between executions,
and a decoupled model's ``execute`` is not waited for, so one instance runs several at once.  On one
gRPC stream a decoupled model's responses go out as they come: a request that ends sooner is answered
sooner.  Each model runs in a model process and in the server process, each server mode once.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support import modes
from tests.support.models import write_model
from tests.support.server import ServerProcess

frontend_workers = modes.frontend_workers

#: Decoupled: waits ``INPUT0`` seconds, then answers it with the final flag; raises when it is negative.
SLEEPER_PY = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            seconds = float(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0])
            if seconds < 0:
                raise ValueError("wait seconds cannot be negative")
            await asyncio.sleep(seconds)
            out = pb_utils.Tensor("OUTPUT0", np.array([seconds], np.float32))
            request.get_response_sender().send(
                pb_utils.InferenceResponse([out]), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )
        return None
"""

#: Not decoupled: starts a task that ends 0.1 s later; answers how many such tasks had ended.
BACKGROUND_PY = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.ended = 0
        self.tasks = set()

    async def later(self):
        await asyncio.sleep(0.1)
        self.ended += 1

    async def execute(self, requests):
        ended = self.ended
        task = asyncio.create_task(self.later())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([ended], np.float32))]) for _ in requests]
"""

#: Decoupled: a BLS call to ``sleeper`` (INPUT0 seconds); answers how long ``async_exec`` took to return.
WAITER_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            seconds = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            call = pb_utils.InferenceRequest(
                model_name=self.callee, inputs=[seconds], requested_output_names=["OUTPUT0"]
            )
            started = time.monotonic()
            responses = await call.async_exec(decoupled=True)
            waited = time.monotonic() - started
            answered = [r for r in responses if not r.has_error() and r.output_tensors()]
            out = pb_utils.Tensor("OUTPUT0", np.array([waited if answered else -1.0], np.float32))
            request.get_response_sender().send(
                pb_utils.InferenceResponse([out]), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )
        return None

    def initialize(self, args):
        self.callee = "sleeper" + ("_in_server" if args["model_name"].endswith("_in_server") else "")
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }}]
{extra}
"""

DECOUPLED = "model_transaction_policy { decoupled: true }"
IN_THE_SERVER = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }'
PLACES = ["", "_in_server"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_workers: int) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("async_execute")
    for place in PLACES:
        extra = IN_THE_SERVER if place else ""
        write_model(repo, "sleeper" + place, CONFIG.format(name="sleeper" + place, extra=f"{DECOUPLED}\n{extra}"), SLEEPER_PY)
        write_model(repo, "background" + place, CONFIG.format(name="background" + place, extra=extra), BACKGROUND_PY)
        write_model(repo, "waiter" + place, CONFIG.format(name="waiter" + place, extra=f"{DECOUPLED}\n{extra}"), WAITER_PY)
    with ServerProcess([repo], frontend_workers=frontend_workers) as served:
        yield served


def _stream(server: ServerProcess, model: str, waits: list[float], count: int) -> list[object]:
    """Send one request per wait on one stream; the first ``count`` answers, in the order they came."""
    received: queue.Queue[object] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: received.put(error or result))
        for seconds in waits:
            tensor = grpcclient.InferInput("INPUT0", [1], "FP32")
            tensor.set_data_from_numpy(np.array([seconds], np.float32))
            client.async_stream_infer(model, [tensor])
        answers = [received.get(timeout=30) for _ in range(count)]
        client.stop_stream()
    return answers


@pytest.mark.parametrize("place", PLACES)
def test_a_decoupled_async_execute_is_not_waited_for(server: ServerProcess, place: str) -> None:
    started = time.monotonic()
    answers = _stream(server, "sleeper" + place, [1.5, 0.1], 2)
    # the second request ran while the first one awaited, and its answer went out first
    values = []
    for answer in answers:
        assert not isinstance(answer, InferenceServerException), answer
        values.append(round(float(answer.as_numpy("OUTPUT0")[0]), 1))  # type: ignore[attr-defined]
    assert values == [0.1, 1.5]
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("place", PLACES)
def test_a_decoupled_async_execute_that_raises_ends_its_stream_with_the_error(
    server: ServerProcess, place: str
) -> None:
    model = "sleeper" + place
    (answer,) = _stream(server, model, [-1.0], 1)
    assert isinstance(answer, InferenceServerException)
    assert answer.message().startswith(
        f"Failed to process the request(s) for model '{model}_0', message: ValueError: wait seconds "
        "cannot be negative"
    )
    assert server.logged("ValueError: wait seconds cannot be negative")  # its traceback, as Triton logs it
    (after,) = _stream(server, model, [0.0], 1)  # and it serves on
    assert not isinstance(after, InferenceServerException), after


@pytest.mark.parametrize("place", PLACES)
def test_tasks_an_async_execute_starts_run_on_after_it_returned(server: ServerProcess, place: str) -> None:
    tensor = grpcclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.zeros(1, np.float32))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        first = float(client.infer("background" + place, [tensor]).as_numpy("OUTPUT0")[0])
        time.sleep(0.5)  # no execution meanwhile: only the model's own loop can end its task
        second = float(client.infer("background" + place, [tensor]).as_numpy("OUTPUT0")[0])
    assert second == first + 1


@pytest.mark.parametrize("place", PLACES)
def test_a_streamed_bls_call_returns_once_its_first_answer_came(server: ServerProcess, place: str) -> None:
    """As Triton's ``exec``/``async_exec(decoupled=True)``: a model that awaits several calls and then
    iterates each (blocking its loop) has made all of them by then (NVIDIA's qa async_execute)."""
    (answer,) = _stream(server, "waiter" + place, [0.5], 1)
    assert not isinstance(answer, InferenceServerException), answer
    assert float(answer.as_numpy("OUTPUT0")[0]) >= 0.45  # type: ignore[attr-defined]
