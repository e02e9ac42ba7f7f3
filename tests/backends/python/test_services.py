"""What model code reaches through ``pb_utils`` without a handle (its BLS runner and custom metrics)
is bound by whoever runs the model: per call in the engine, per process in a model process.  Two
servers in one process keep their models' services apart, and threads a model starts in its model
process still reach the server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from naiad.backends.python import pb_utils
from naiad.backends.python.backend import PythonBackend
from naiad.backends.python.instance import PythonModelInstance
from naiad.backends.runtime import Runtime
from tritonclient.utils import InferenceServerException

from tests.backends.python.models import instance_context, request, write_model
from tests.support.server import ServerProcess

COUNTING_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily("calls", "calls seen", pb_utils.MetricFamily.COUNTER)
        self.calls = self.family.Metric(labels={"model": args["model_name"]})

    def execute(self, requests):
        self.calls.increment(len(requests))
        out = pb_utils.Tensor("OUTPUT0", np.array([self.calls.value()], np.float32))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""

COUNTING_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }}]
parameters {{ key: "NAIAD_INSTANCE_PROCESSES" value: {{ string_value: "false" }} }}
"""


def _calls(backend: PythonBackend) -> dict[str, float]:
    """The ``calls`` family's values in ``backend``'s store, by label set."""
    families = backend.custom_metrics.local.snapshot()
    return {str(s.labels): s.value for name, _, _, series in families if name == "calls" for s in series}


@pytest.fixture
def two_servers() -> Iterator[tuple[PythonBackend, PythonBackend]]:
    backends = []
    for _ in range(2):
        backend = Runtime().backend("python")
        assert isinstance(backend, PythonBackend)
        backends.append(backend)
    yield backends[0], backends[1]


def test_two_servers_in_one_process_keep_their_models_metrics_apart(
    tmp_path: Path, two_servers: tuple[PythonBackend, PythonBackend]
) -> None:
    first, second = two_servers
    loaded: list[PythonModelInstance] = []
    try:
        for backend, name in ((first, "first"), (second, "second")):
            model_dir = write_model(tmp_path, name, COUNTING_PY, COUNTING_CONFIG.format(name=name))
            instance = backend.create_instance(instance_context(model_dir))
            assert isinstance(instance, PythonModelInstance)
            loaded.append(instance)
        one, other = loaded
        for _ in range(3):
            one.execute([request("first", INPUT0=[1.0])])
        (answer,) = other.execute([request("second", INPUT0=[1.0])])
        assert answer.outputs[0].data.tolist() == [1.0]  # its own counter, not the first's

        first_calls, second_calls = _calls(first), _calls(second)
        assert list(first_calls.values()) == [3.0] and "first" in next(iter(first_calls))
        assert list(second_calls.values()) == [1.0] and "second" in next(iter(second_calls))
        assert pb_utils.SERVICES.get() is None  # nothing stays bound on the caller's context
    finally:
        for instance in loaded:
            instance.close()
    assert _calls(first) == {} and _calls(second) == {}  # each family left with its model


def test_outside_a_served_model_pb_utils_says_what_is_missing() -> None:
    with pytest.raises(pb_utils.TritonModelException, match="only be created while the model is served"):
        pb_utils.MetricFamily("loose", "made by no model", pb_utils.MetricFamily.GAUGE)
    bls = pb_utils.InferenceRequest(model_name="add_sub", requested_output_names=[], inputs=[])
    with pytest.raises(pb_utils.TritonModelException, match="only be made while the model is served"):
        bls.exec()


THREADED_BLS_PY = """
import contextvars
import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # IN_CONTEXT: start each thread in the model's context (what a model in the engine needs)
        self.in_context = "IN_CONTEXT" in json.loads(args["model_config"])["parameters"]

    def execute(self, requests):
        for request in requests:
            if self.in_context:
                thread = threading.Thread(target=contextvars.copy_context().run, args=(self.answer, request))
            else:
                thread = threading.Thread(target=self.answer, args=(request,))
            thread.start()
        return None

    def answer(self, request):
        sender = request.get_response_sender()
        try:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            called = pb_utils.InferenceRequest(
                model_name="add_sub",
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)],
            ).exec()
            if called.has_error():
                raise pb_utils.TritonModelException(called.error().message())
            total = pb_utils.get_output_tensor_by_name(called, "OUTPUT0").as_numpy()
            response = pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", total)])
        except Exception as exc:
            response = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
        sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

THREADED_BLS_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
model_transaction_policy {{ decoupled: true }}
{parameters}
"""
IN_THE_SERVER = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }'
IN_CONTEXT = 'parameters { key: "IN_CONTEXT" value: { string_value: "yes" } }'
THREADED = {
    "threaded_bls": "",
    "threaded_bls_in_server": IN_THE_SERVER,
    "threaded_bls_in_server_context": IN_THE_SERVER + IN_CONTEXT,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("repo")
    for name, parameters in THREADED.items():
        write_model(repo, name, THREADED_BLS_PY, THREADED_BLS_CONFIG.format(name=name, parameters=parameters))
    add_sub = Path(__file__).resolve().parents[3] / "examples" / "model_repository" / "add_sub"
    (repo / "add_sub").symlink_to(add_sub, target_is_directory=True)
    with ServerProcess([repo]) as process:
        yield process


def _streamed(server: ServerProcess, model: str) -> list[np.ndarray | InferenceServerException]:
    x = np.array([1, 2, 3, 4], np.float32)
    answers: list[np.ndarray | InferenceServerException] = []
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(
            callback=lambda result, error: answers.append(error or result.as_numpy("OUTPUT0"))
        )
        inp = grpcclient.InferInput("INPUT0", [4], "FP32")
        inp.set_data_from_numpy(x)
        client.async_stream_infer(model, [inp])
        client.stop_stream()
    return answers


@pytest.mark.parametrize("model", ["threaded_bls", "threaded_bls_in_server_context"])
def test_a_thread_the_model_started_makes_bls_calls(server: ServerProcess, model: str) -> None:
    """In its model process any thread does (the process's binding); in the engine a thread that
    runs in the model's context."""
    answers = _streamed(server, model)
    assert len(answers) == 1 and isinstance(answers[0], np.ndarray), answers
    assert answers[0].tolist() == [2, 4, 6, 8]


def test_a_bare_thread_of_a_model_in_the_engine_is_told_why_its_bls_call_fails(server: ServerProcess) -> None:
    answers = _streamed(server, "threaded_bls_in_server")
    assert len(answers) == 1 and isinstance(answers[0], InferenceServerException), answers
    assert "BLS requests can only be made while the model is served" in str(answers[0].message())
    with httpclient.InferenceServerClient(server.http_url) as client:  # every model still serves
        assert all(client.is_model_ready(name) for name in [*THREADED, "add_sub"])
