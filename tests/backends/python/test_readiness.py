"""A Python model's readiness at run time, as Triton's readiness requests ask it (Triton 25.12+).

``/v2/models/{name}/ready`` and gRPC ``ModelReady`` ask each instance: a model that defines
``is_ready()`` says itself whether it is ready (a coroutine is awaited; raising, answering something
other than a bool or taking over 5 s is not ready), asked while ``execute`` may be running, and a
model process that is not serving makes its model not ready.  Why a model is not ready is logged at
verbose level 1 with Triton's words.  ``pb_utils.is_model_ready`` asks the same.  Both server modes;
the models run in model processes, and one in the server process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support import modes
from tests.support.models import write_model
from tests.support.server import ServerProcess

frontend_workers = modes.frontend_workers

#: ``is_ready()`` answers what ``ANSWER`` says: "flag" (whether the flag file exists), "raise",
#: "word" (a str), "async" (a coroutine answering True) or "wait" (True once the flag file exists,
#: checked for up to 30 s).  ``execute`` answers its input, once the "busy" file is gone.
READINESS_PY = """
import asyncio
import json
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

WORK = Path({work!r})


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.answer = parameters["ANSWER"]["string_value"]
        self.flag = WORK / (args["model_name"] + ".flag")

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            while (WORK / "busy").exists():
                time.sleep(0.01)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses

    def is_ready(self):
        if self.answer == "flag":
            return self.flag.exists()
        if self.answer == "raise":
            raise RuntimeError("the check found a fault")
        if self.answer == "word":
            return "yes"
        if self.answer == "async":
            return self.ready_later()
        deadline = time.monotonic() + 30
        while not self.flag.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return True

    async def ready_later(self):
        await asyncio.sleep(0.01)
        return True
"""

#: No ``is_ready()``: answers ``pb_utils.is_model_ready(<its input, a model's name>)``.
ASKER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            name = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0].decode()
            ready = np.array([pb_utils.is_model_ready(name)], dtype=np.bool_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", ready)]))
        return responses
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: {input_type} dims: [ 1 ] }}]
output [{{ name: "OUTPUT0" data_type: {output_type} dims: [ 1 ] }}]
parameters {{ key: "ANSWER" value: {{ string_value: "{answer}" }} }}
{extra}
"""

IN_THE_SERVER = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }'

#: Model name -> what its ``is_ready()`` does (see ``READINESS_PY``).
MODELS = {
    "flagged": "flag",
    "flagged_in_server": "flag",
    "raising": "raise",
    "wordy": "word",
    "awaiting": "async",
    "waiting": "wait",
    "asker": "asker",
}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


@pytest.fixture
def server(tmp_path: Path, work: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    repo = tmp_path / "repo"
    for name, answer in MODELS.items():
        types = ("TYPE_STRING", "TYPE_BOOL") if answer == "asker" else ("TYPE_FP32", "TYPE_FP32")
        extra = IN_THE_SERVER if name.endswith("_in_server") else ""
        config = CONFIG.format(name=name, input_type=types[0], output_type=types[1], answer=answer, extra=extra)
        write_model(repo, name, config, ASKER_PY if answer == "asker" else READINESS_PY.format(work=str(work)))
    args = ["--strict-readiness=false", "--log-verbose=1"]
    with ServerProcess([repo], args, frontend_workers=frontend_workers) as server:
        yield server


def _ready(server: ServerProcess, name: str) -> tuple[bool, bool]:
    """What HTTP and gRPC say."""
    http = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        return http.is_model_ready(name), grpc.is_model_ready(name)
    finally:
        http.close()
        grpc.close()


def _infer(server: ServerProcess, name: str, value: float) -> float:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
    try:
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.float32))
        return float(client.infer(name, [tensor]).as_numpy("OUTPUT0")[0])
    finally:
        client.close()


def _asks(server: ServerProcess, name: str) -> bool:
    """What ``pb_utils.is_model_ready(name)`` says in a model's ``execute``."""
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
    try:
        tensor = httpclient.InferInput("INPUT0", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([name.encode()], dtype=np.object_))
        return bool(client.infer("asker", [tensor]).as_numpy("OUTPUT0")[0])
    finally:
        client.close()


def test_a_model_says_whether_it_is_ready(server: ServerProcess, work: Path) -> None:
    for name in ("flagged", "flagged_in_server"):
        assert _ready(server, name) == (False, False)
        assert _infer(server, name, 3.0) == 3.0  # the check does not stop it from serving
        assert not _asks(server, name)
        (work / f"{name}.flag").touch()
        assert _ready(server, name) == (True, True)
        assert _asks(server, name)
        (work / f"{name}.flag").unlink()
        assert _ready(server, name) == (False, False)
    assert server.logged(
        "Model 'flagged' version 1 is not ready: Model 'flagged_0' is not ready (user-defined check failed)."
    )
    assert _ready(server, "awaiting") == (True, True)
    assert _ready(server, "asker") == (True, True)  # (a model without is_ready())


def test_a_check_that_fails_is_not_ready_with_its_reason(server: ServerProcess) -> None:
    assert _ready(server, "raising") == (False, False)
    assert _ready(server, "wordy") == (False, False)
    assert _infer(server, "raising", 1.5) == 1.5
    assert server.logged("Model 'raising' version 1 is not ready: RuntimeError: the check found a fault")
    assert server.logged("Model 'wordy' version 1 is not ready: is_ready() must return a boolean value")


def test_a_model_is_asked_while_it_executes(server: ServerProcess, work: Path) -> None:
    (work / "busy").touch()
    (work / "flagged.flag").touch()
    answered: list[float] = []
    executing = threading.Thread(target=lambda: answered.append(_infer(server, "flagged", 2.0)))
    executing.start()
    try:
        time.sleep(0.3)
        assert _ready(server, "flagged") == (True, True)
        assert not answered  # still executing
    finally:
        (work / "busy").unlink()
        executing.join(30)
    assert answered == [2.0]


def test_a_slow_check_times_out_and_a_later_request_waits_for_its_answer(
    server: ServerProcess, work: Path
) -> None:
    """Triton's 5 s: the first request is answered not ready then; one that comes while the question
    is under way waits for its answer instead of asking again."""
    http = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
    first: list[tuple[bool, float]] = []

    def ask_first() -> None:
        started = time.monotonic()
        first.append((http.is_model_ready("waiting"), time.monotonic() - started))

    asking = threading.Thread(target=ask_first)
    asking.start()
    asking.join(30)
    http.close()
    assert first and first[0][0] is False and 4.5 < first[0][1] < 10, first
    assert server.logged(
        "Model 'waiting' version 1 is not ready: Timed out waiting for user-defined is_ready() response"
    )
    later: list[bool] = []
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    waiting = threading.Thread(target=lambda: later.append(grpc.is_model_ready("waiting")))
    waiting.start()
    time.sleep(0.5)
    (work / "waiting.flag").touch()  # the question under way is answered: ready
    waiting.join(30)
    grpc.close()
    assert later == [True]
