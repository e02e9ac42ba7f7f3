"""What a model in a model process finds around it, as in Triton's stub (checked with Triton 2.51):
``sys.argv == [""]``, and its version folder and model folder on ``sys.path`` for the process's life,
so ``import model`` (what ``unittest.main("model")`` does, as NVIDIA's qa models call it) and a
sibling module first imported inside ``execute`` are found.  And how a non-decoupled model's response
sender and its returned list combine: the first response sent stands, and it may come from a thread
after ``execute`` returned, as in Triton.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.models import write_model
from tests.support.server import ServerProcess

#: Answers [sys.argv == [""], ``import model`` finds this file, ``import helper`` (first imported here)].
ENVIRONMENT_PY = """
import importlib
import sys
import unittest

import numpy as np
import triton_python_backend_utils as pb_utils


class Checks(unittest.TestCase):
    def test_nothing(self):
        pass


class TritonPythonModel:
    def execute(self, requests):
        found = hasattr(importlib.import_module("model"), "TritonPythonModel")
        helper = importlib.import_module("helper").VALUE == 7
        ran = unittest.main("model", exit=False).result.wasSuccessful()
        flags = [sys.argv == [""], found, helper, ran]
        out = pb_utils.Tensor("OUTPUT0", np.array(flags, np.int32))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""

#: ``INPUT0``: 0 sends a response and returns another; 1 sends two (the second send raises).
SENDER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


def answer(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([value], np.int32))])


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            action = int(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0])
            sender = request.get_response_sender()
            sender.send(answer(10), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            if action == 1:
                sender.send(answer(11), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            responses.append(answer(12))
        return responses
"""

#: Returns ``None`` and answers 0.3 s later from a thread of its own.
LATER_PY = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.answer, args=(request.get_response_sender(),)).start()
        return None

    def answer(self, sender):
        time.sleep(0.3)
        out = pb_utils.Tensor("OUTPUT0", np.array([20], np.int32))
        sender.send(pb_utils.InferenceResponse([out]), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }}]
{extra}
"""

IN_THE_SERVER = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("stub_environment")
    folder = write_model(repo, "environment", CONFIG.format(name="environment", extra=""), ENVIRONMENT_PY)
    (folder / "1" / "helper.py").write_text("VALUE = 7\n")
    for place, extra in (("", ""), ("_in_server", IN_THE_SERVER)):
        write_model(repo, "sender" + place, CONFIG.format(name="sender" + place, extra=extra), SENDER_PY)
        write_model(repo, "later" + place, CONFIG.format(name="later" + place, extra=extra), LATER_PY)
    with ServerProcess([repo]) as served:
        yield served


def _infer(server: ServerProcess, model: str, value: int) -> list[int]:
    tensor = httpclient.InferInput("INPUT0", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    with httpclient.InferenceServerClient(server.http_url) as client:
        return [int(v) for v in client.infer(model, [tensor]).as_numpy("OUTPUT0")]


def test_a_model_process_has_tritons_argv_and_import_path(server: ServerProcess) -> None:
    assert _infer(server, "environment", 0) == [1, 1, 1, 1]


@pytest.mark.parametrize("model", ["sender", "sender_in_server"])
def test_the_first_response_a_non_decoupled_model_sent_stands(server: ServerProcess, model: str) -> None:
    assert _infer(server, model, 0) == [10]  # the response it returned after sending one is dropped
    assert _infer(server, model, 1) == [10]  # its second send raised; the first response stands
    assert server.logged("Non-decoupled model cannot send more than one response")


@pytest.mark.parametrize("model", ["later", "later_in_server"])
def test_a_non_decoupled_response_may_come_after_execute_returned(server: ServerProcess, model: str) -> None:
    assert _infer(server, model, 0) == [20]
