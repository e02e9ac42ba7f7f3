"""Cancelling a decoupled BLS call, as NVIDIA's qa/L0_backend_python/decoupled does it.

``test_decoupled_bls_cancel`` and friends: a model streams a decoupled BLS request, calls the response
iterator's ``cancel()`` once it has enough, and the callee, which sends until ``request.is_cancelled()``,
stops; the caller sees a CANCELLED error and only the responses it summed.  A callee that ignores the
cancellation goes on, and the caller gets all its responses, as in Triton (``cancel()`` cancels the
request; it does not cut the stream).  The models run in the engine and in model processes (the
default), where each answer reaches the caller's process as the callee sends it and ``cancel()`` goes
back to the server, which cancels the callee's request.  The caller is a plain model (its process has
no reader thread: the waiting model thread reads the answers) and a decoupled one (a reader thread
hands them over).
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.models import write_model
from tests.support.server import ServerProcess

#: Sends 1 every 50 ms, 50 times, unless cancelled (INPUT 2: it ignores the cancellation).
UNTIL_CANCELLED_PY = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        request = requests[0]
        ignore = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()[0]) == 2
        sender = request.get_response_sender()
        for _ in range(50):
            if not ignore and request.is_cancelled():
                error = pb_utils.TritonError("request has been cancelled", pb_utils.TritonError.CANCELLED)
                sender.send(pb_utils.InferenceResponse(error=error),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return None
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", np.array([1], np.int32))]))
            time.sleep(0.05)  # (a cancellation reaches it well within a gap, even on a loaded machine)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

CANCELLER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


def summed(request):
    mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0].decode()
    ignore = bool(pb_utils.get_input_tensor_by_name(request, "IGNORE").as_numpy()[0])
    call = pb_utils.InferenceRequest(
        model_name="until_cancelled_" + mode, requested_output_names=["OUTPUT"],
        inputs=[pb_utils.Tensor("INPUT", np.array([2 if ignore else 1], np.int32))])
    stream = call.exec(decoupled=True)
    total, cancelled = 0, False
    for answer in stream:
        if answer.has_error():
            cancelled = answer.error().code() == pb_utils.TritonError.CANCELLED
            break
        if answer.output_tensors():
            total += int(answer.output_tensors()[0].as_numpy()[0])
        if total == 5:
            stream.cancel()
    stream.cancel()  # after the end: nothing to cancel, no error
    return pb_utils.InferenceResponse([pb_utils.Tensor("SUM", np.array([total], np.int32)),
                                       pb_utils.Tensor("IS_CANCELLED", np.array([cancelled], np.bool_))])


class TritonPythonModel:
    def execute(self, requests):
        if not self.decoupled:
            return [summed(request) for request in requests]
        for request in requests:
            request.get_response_sender().send(summed(request),
                                               flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def initialize(self, args):
        import json
        self.decoupled = json.loads(args["model_config"])["model_transaction_policy"]["decoupled"]
"""

#: Cancels a call that waits in the callee's queue behind another (the callee has one instance).
QUEUED_CANCELLER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        mode = pb_utils.get_input_tensor_by_name(requests[0], "MODE").as_numpy()[0].decode()

        def call(value):
            return pb_utils.InferenceRequest(
                model_name="until_cancelled_" + mode, requested_output_names=["OUTPUT"],
                inputs=[pb_utils.Tensor("INPUT", np.array([value], np.int32))]).exec(decoupled=True)

        first = call(2)  # holds the callee's instance for 2.5 s
        second = call(1)
        second.cancel()
        errors = [answer.error().code() for answer in second if answer.has_error()]
        total = sum(int(answer.output_tensors()[0].as_numpy()[0]) for answer in first if answer.output_tensors())
        cancelled = errors == [pb_utils.TritonError.CANCELLED]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SUM", np.array([total], np.int32)),
                                            pb_utils.Tensor("IS_CANCELLED", np.array([cancelled], np.bool_))])]
"""

MODES = ("process", "engine")


def _config(name: str, decoupled: bool, in_process: bool, inputs: str, outputs: str) -> str:
    return f"""
    name: "{name}"
    backend: "python"
    max_batch_size: 0
    model_transaction_policy {{ decoupled: {str(decoupled).lower()} }}
    input [ {inputs} ]
    output [ {outputs} ]
    parameters {{ key: "NAIAD_INSTANCE_PROCESSES" value {{ string_value: "{str(not in_process).lower()}" }} }}
    """


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("bls-cancel-repo")
    for mode in MODES:
        in_process = mode == "engine"
        write_model(
            repo,
            f"until_cancelled_{mode}",
            _config(
                f"until_cancelled_{mode}",
                True,
                in_process,
                '{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }',
                '{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }',
            ),
            UNTIL_CANCELLED_PY,
        )
        callers = (
            ("canceller", False, CANCELLER_PY),
            ("streaming_canceller", True, CANCELLER_PY),
            ("queued_canceller", False, QUEUED_CANCELLER_PY),
        )
        for caller, decoupled, source in callers:
            write_model(
                repo,
                f"{caller}_{mode}",
                _config(
                    f"{caller}_{mode}",
                    decoupled,
                    in_process,
                    '{ name: "MODE" data_type: TYPE_STRING dims: [ 1 ] },'
                    ' { name: "IGNORE" data_type: TYPE_BOOL dims: [ 1 ] }',
                    '{ name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] },'
                    ' { name: "IS_CANCELLED" data_type: TYPE_BOOL dims: [ 1 ] }',
                ),
                source,
            )
    with ServerProcess([repo]) as process:
        yield process


def _call(server: ServerProcess, caller: str, mode: str, ignore: bool) -> tuple[int, bool]:
    """``SUM`` and ``IS_CANCELLED`` of one request to the ``caller`` model of ``mode``."""
    values = [np.array([mode.encode()], dtype=np.object_), np.array([ignore])]
    if caller != "streaming_canceller":
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
        try:
            tensors = [
                httpclient.InferInput("MODE", [1], "BYTES"),
                httpclient.InferInput("IGNORE", [1], "BOOL"),
            ]
            for tensor, value in zip(tensors, values, strict=True):
                tensor.set_data_from_numpy(value)
            result = client.infer(f"{caller}_{mode}", tensors)
        finally:
            client.close()
    else:
        received: queue.SimpleQueue[object] = queue.SimpleQueue()
        stream = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            stream.start_stream(callback=lambda result, error: received.put(error or result))
            inputs = [
                grpcclient.InferInput("MODE", [1], "BYTES"),
                grpcclient.InferInput("IGNORE", [1], "BOOL"),
            ]
            for tensor, value in zip(inputs, values, strict=True):
                tensor.set_data_from_numpy(value)
            stream.async_stream_infer(f"{caller}_{mode}", inputs)
            result = received.get(timeout=30)
        finally:
            stream.stop_stream()
            stream.close()
    assert not isinstance(result, Exception), result
    return int(result.as_numpy("SUM")[0]), bool(result.as_numpy("IS_CANCELLED")[0])


@pytest.mark.parametrize("caller", ["canceller", "streaming_canceller"])
@pytest.mark.parametrize("mode", MODES)
def test_cancelled_decoupled_bls_call_stops_the_callee(server: ServerProcess, mode: str, caller: str) -> None:
    assert _call(server, caller, mode, ignore=False) == (5, True)


@pytest.mark.parametrize("mode", MODES)
def test_a_callee_that_ignores_the_cancellation_streams_to_its_end(server: ServerProcess, mode: str) -> None:
    assert _call(server, "canceller", mode, ignore=True) == (50, False)


@pytest.mark.parametrize("mode", MODES)
def test_a_cancelled_call_still_queued_ends_cancelled(server: ServerProcess, mode: str) -> None:
    """Triton answers a request cancelled in its queue with CANCELLED; here the callee's instance is
    busy with the caller's first call, and the second, cancelled, never runs."""
    assert _call(server, "queued_canceller", mode, ignore=False) == (50, True)
