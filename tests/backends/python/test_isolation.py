"""Fault isolation: a model process that crashes, hangs or runs away costs only that model's requests.

One server runs a copy of ``faulty`` per kind of fault (each copy keeps its own crash count), while a
load generator runs ``identity`` the whole time and must see no failure.  ``faulty`` answers ``INPUT0 =
[action]`` with its process id, or misbehaves as ``action`` says.  Each fault is tried over HTTP and
gRPC, in both server modes (one process, and frontend workers in front of the engine, where the model
processes hang off the engine and the error crosses to the worker that holds the client).  Afterwards
no process of the server's tree and no shared-memory file of it is left.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import modes
from tests.support.models import write_identity, write_model
from tests.support.processes import descendants
from tests.support.server import ServerProcess

frontend_workers = modes.frontend_workers

SERVE, SEGFAULT, EXIT, HANG, BOMB = 0, 1, 2, 3, 4

FAULTY_PY = """
import ctypes
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        action = int(pb_utils.get_input_tensor_by_name(requests[0], "INPUT0").as_numpy()[0])
        if action == 1:
            ctypes.string_at(0)  # a segfault, as a buggy native extension does
        elif action == 2:
            os._exit(7)
        elif action == 3:
            time.sleep(3600)
        elif action == 4:
            hoard = []
            for _ in range(100):  # 2 GiB at most, touched page by page
                hoard.append(np.ones(20 << 20, dtype=np.uint8))
                time.sleep(0.01)
        out = np.array([os.getpid()], dtype=np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]) for _ in requests]
"""

FAULTY_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_INT64 dims: [ 1 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 1 ] }}]
parameters {{ key: "NAIAD_MEMORY_LIMIT_MIB" value: {{ string_value: "200" }} }}
{extra}
"""


def _timeout(seconds: float) -> str:
    return f'parameters {{ key: "NAIAD_EXECUTION_TIMEOUT_SECONDS" value: {{ string_value: "{seconds:g}" }} }}'


DECOUPLED = "model_transaction_policy { decoupled: true }"
NOT_HEALTHY = "Stub process '{model}_0' is not healthy."


def _repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    extras = {"killed": _timeout(30), "hangs": _timeout(1.5)}
    for name in ("segv", "exits", "killed", "hangs", "bomb", "poison"):
        write_model(repo, name, FAULTY_CONFIG.format(name=name, extra=extras.get(name, "")), FAULTY_PY)
    # a decoupled model runs on its instance's thread rather than from the event loop
    write_model(repo, "segv_stream", FAULTY_CONFIG.format(name="segv_stream", extra=DECOUPLED), DECOUPLED_PY)
    write_identity(repo, "identity", "TYPE_FP32")
    trusted = FAULTY_CONFIG.format(name="trusted", extra="").split("parameters")[0] + IN_THE_ENGINE
    write_model(repo, "trusted", trusted, FAULTY_PY)
    return repo


IN_THE_ENGINE = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }\n'


DECOUPLED_PY = """
import ctypes
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            action = int(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0])
            sender = request.get_response_sender()
            if action == 1:
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([0]))]))
                ctypes.string_at(0)
            out = np.array([os.getpid()], dtype=np.int64)
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


class LoadGenerator:
    """Runs ``identity`` over HTTP in a loop on a thread; every failure is kept."""

    def __init__(self, server: ServerProcess) -> None:
        self._server = server
        self._stop = threading.Event()
        self.answered = 0
        self.failures: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LoadGenerator:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        data = np.arange(4, dtype=np.float32)
        with httpclient.InferenceServerClient(self._server.http_url, network_timeout=30.0) as client:
            while not self._stop.is_set():
                tensor = httpclient.InferInput("INPUT0", [4], "FP32")
                tensor.set_data_from_numpy(data)
                try:
                    output = client.infer("identity", [tensor]).as_numpy("OUTPUT0")
                    assert output is not None and output.tolist() == data.tolist()
                    self.answered += 1
                except Exception as exc:
                    self.failures.append(repr(exc))


def _http(server: ServerProcess, model: str, action: int) -> int:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=60.0) as client:
        tensor = httpclient.InferInput("INPUT0", [1], "INT64")
        tensor.set_data_from_numpy(np.array([action], dtype=np.int64))
        output = client.infer(model, [tensor]).as_numpy("OUTPUT0")
    assert output is not None
    return int(output[0])


def _grpc(server: ServerProcess, model: str, action: int) -> int:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        tensor = grpcclient.InferInput("INPUT0", [1], "INT64")
        tensor.set_data_from_numpy(np.array([action], dtype=np.int64))
        output = client.infer(model, [tensor], client_timeout=60.0).as_numpy("OUTPUT0")
    assert output is not None
    return int(output[0])


Call = Callable[[ServerProcess, str, int], int]
TRANSPORTS = pytest.mark.parametrize("call", [_http, _grpc], ids=["http", "grpc"])


def _fails(call: Call, server: ServerProcess, model: str, action: int) -> str:
    with pytest.raises(InferenceServerException) as caught:
        call(server, model, action)
    status = str(caught.value.status())
    assert status in ("500", "StatusCode.INTERNAL"), status
    return str(caught.value.message())


def _served_again(server: ServerProcess, model: str, old_pid: int) -> int:
    """The pid of the restarted model process, once it serves (restarts take a backoff delay)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            pid = _http(server, model, SERVE)
        except InferenceServerException as exc:
            # "is restarting"; or a request that reached the process in the moment it died
            assert "is not healthy" in str(exc.message()), exc.message()
            assert time.monotonic() < deadline, "the model process was not restarted"
            time.sleep(0.05)
            continue
        assert pid != old_pid
        return pid


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _shm_files(pids: list[int]) -> list[str]:
    return [name for name in os.listdir("/dev/shm") if any(name.startswith(f"naiad-{pid}-") for pid in pids)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_workers: int) -> Iterator[ServerProcess]:
    repo = _repository(tmp_path_factory.mktemp("isolation"))
    args = ["--model-control-mode=explicit", "--load-model=*"]
    with ServerProcess([repo], args, frontend_workers=frontend_workers) as served:
        tree = descendants(served.process.pid) if served.process else []
        with LoadGenerator(served) as load:
            yield served
        assert load.failures == []
        assert load.answered > 0
        tree += [pid for pid in descendants(served.process.pid) if pid not in tree] if served.process else []
        assert served.stop() == 0
    assert len(tree) >= 2  # the template and at least one model process
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in tree if _alive(pid)] == []
    assert _shm_files([served.process.pid, *tree] if served.process else tree) == []


@TRANSPORTS
def test_a_segfault_fails_only_its_request_and_the_process_restarts(
    server: ServerProcess, call: Call
) -> None:
    pid = _http(server, "segv", SERVE)
    message = _fails(call, server, "segv", SEGFAULT)
    assert message.startswith(NOT_HEALTHY.format(model="segv")), message
    assert "stopped while executing: killed by signal 11 (SIGSEGV)" in message
    # the next request, sent at once, is told the process is restarting (as Triton's "is not
    # healthy"), never that it was running when the process died: it did not crash it
    try:
        call(server, "segv", SERVE)
    except InferenceServerException as exc:
        after = str(exc.message())
        assert after.startswith(NOT_HEALTHY.format(model="segv")), after
        assert after.endswith("stopped (killed by signal 11 (SIGSEGV)) and is restarting"), after
    _served_again(server, "segv", pid)
    with urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready") as ready:
        assert ready.status == 200


@TRANSPORTS
def test_os_exit_fails_its_request_with_the_exit_status(server: ServerProcess, call: Call) -> None:
    pid = _grpc(server, "exits", SERVE)
    message = _fails(call, server, "exits", EXIT)
    assert message.startswith(NOT_HEALTHY.format(model="exits")), message
    assert "exit status 7" in message
    _served_again(server, "exits", pid)


@TRANSPORTS
def test_a_model_process_killed_from_outside_is_restarted_idle_or_busy(
    server: ServerProcess, call: Call
) -> None:
    pid = _http(server, "killed", SERVE)
    os.kill(pid, signal.SIGKILL)  # idle: noticed at once, restarted without a request
    busy_pid = _served_again(server, "killed", pid)
    threading.Timer(0.3, os.kill, (busy_pid, signal.SIGKILL)).start()
    message = _fails(call, server, "killed", HANG)  # busy: its request fails
    assert "killed by signal 9 (SIGKILL)" in message
    _served_again(server, "killed", busy_pid)


@TRANSPORTS
def test_a_hung_execution_fails_at_the_timeout_and_the_instance_restarts(
    server: ServerProcess, call: Call
) -> None:
    pid = _http(server, "hangs", SERVE)
    started = time.monotonic()
    message = _fails(call, server, "hangs", HANG)
    assert 1.4 < time.monotonic() - started < 10
    assert "ran past the model's execution timeout (NAIAD_EXECUTION_TIMEOUT_SECONDS 1.5)" in message
    _served_again(server, "hangs", pid)


@TRANSPORTS
def test_a_memory_bomb_is_killed_at_the_models_limit(server: ServerProcess, call: Call) -> None:
    pid = _http(server, "bomb", SERVE)
    message = _fails(call, server, "bomb", BOMB)
    assert message.startswith(NOT_HEALTHY.format(model="bomb")), message
    assert "exceeded the model's memory limit (NAIAD_MEMORY_LIMIT_MIB 200)" in message
    _served_again(server, "bomb", pid)
    assert "model 'bomb' instance 'bomb_0'" in server.log()


def _stream(server: ServerProcess, action: int) -> list[object]:
    """What one ``segv_stream`` request over a gRPC stream answers, up to its first error or its
    last response."""
    answers: list[object] = []
    over = threading.Event()

    def received(result: object, error: object) -> None:
        answers.append(error if error is not None else result)
        if error is not None or len(answers) == (1 if action == SERVE else 2):
            over.set()

    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=received)
        tensor = grpcclient.InferInput("INPUT0", [1], "INT64")
        tensor.set_data_from_numpy(np.array([action], dtype=np.int64))
        client.async_stream_infer("segv_stream", [tensor])
        assert over.wait(30)
        client.stop_stream()
    return answers


def test_a_decoupled_model_that_crashes_mid_stream_ends_its_stream_with_the_error(
    server: ServerProcess,
) -> None:
    first, error = _stream(server, SEGFAULT)
    assert not isinstance(first, InferenceServerException)  # what it sent before it crashed arrived
    assert isinstance(error, InferenceServerException)
    assert "killed by signal 11 (SIGSEGV)" in str(error.message())
    deadline = time.monotonic() + 20
    while isinstance(answer := _stream(server, SERVE)[0], InferenceServerException):
        assert "is not healthy" in str(answer.message())
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert int(answer.as_numpy("OUTPUT0")[0]) > 0  # type: ignore[attr-defined]


@TRANSPORTS
def test_a_poison_request_in_a_loop_makes_only_its_model_unavailable_until_loaded_again(
    server: ServerProcess, call: Call
) -> None:
    """(Over HTTP, then gRPC: the first run's reload gives the second a fresh crash count.)"""
    exits_before = _poison_exits(server)
    crashes = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            call(server, "poison", SEGFAULT)
        except InferenceServerException as exc:
            message = str(exc.message())
            if "killed by signal 11" in message and "restarting" not in message:
                crashes += 1
            if "not at ready state" in message or "no available versions" in message:
                break
            time.sleep(0.05)
    assert crashes == 5
    with httpclient.InferenceServerClient(server.http_url) as client:
        (entry,) = [e for e in client.get_model_repository_index() if e["name"] == "poison"]
        assert entry["state"] == "UNAVAILABLE"
        assert "stopped 5 times within 60 s" in entry["reason"]
        assert "killed by signal 11 (SIGSEGV)" in entry["reason"]
        assert not client.is_model_ready("poison")
        assert client.is_server_ready()  # one crashing model never takes the server out of service
        assert client.is_model_ready("identity")
        metrics = urllib.request.urlopen(f"http://{server.metrics_url}/metrics").read().decode()
        assert 'nv_model_state{model="poison",state="UNAVAILABLE",version="1"} 1' in metrics
        assert _poison_exits(server) == exits_before + 5
        assert "stopped 5 times within 60 s" in server.log()

        client.load_model("poison")  # loading it again starts afresh
        assert client.is_model_ready("poison")
    assert _http(server, "poison", SERVE) > 0


def _poison_exits(server: ServerProcess) -> int:
    """``poison``'s model-process exits by signal so far, from ``/metrics`` (0 before the first)."""
    metrics = urllib.request.urlopen(f"http://{server.metrics_url}/metrics").read().decode()
    sample = 'naiad_model_process_exits_total{cause="signal",model="poison",version="1"} '
    values = [line.removeprefix(sample) for line in metrics.splitlines() if line.startswith(sample)]
    return int(float(values[0])) if values else 0


def test_a_server_killed_with_sigkill_leaves_no_model_process_behind(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    # (an input of any length: the hung execution's is one past what travels inside the message, so
    # that it lies in a region, a file in /dev/shm)
    config = FAULTY_CONFIG.format(name="hangs", extra=_timeout(30)).replace("dims: [ 1 ]", "dims: [ -1 ]", 1)
    assert "dims: [ -1 ]" in config
    write_model(repo, "hangs", config, FAULTY_PY)
    write_identity(repo, "identity", "TYPE_FP32")
    server = ServerProcess([repo])
    with server:
        assert server.process is not None
        hung = threading.Thread(target=_hang_until_the_server_dies, args=(server,), daemon=True)
        hung.start()  # one model process busy in a hang, the other idle
        time.sleep(0.5)
        tree = descendants(server.process.pid)
        assert len(tree) >= 3  # the template and two model processes
        assert _shm_files([server.process.pid])  # the hung execution's inputs
        server.stop(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in tree if _alive(pid)] == []
        assert _shm_files([server.process.pid, *tree]) == []


def _hang_until_the_server_dies(server: ServerProcess) -> None:
    with pytest.raises(Exception, match=r"closed|reset|refused"):  # any connection error
        with httpclient.InferenceServerClient(server.http_url, network_timeout=60.0) as client:
            tensor = httpclient.InferInput("INPUT0", [1024], "INT64")  # 8 KiB
            tensor.set_data_from_numpy(np.full(1024, HANG, dtype=np.int64))
            client.infer("hangs", [tensor])


def test_a_trusted_model_runs_in_the_server_and_configs_show_only_what_their_files_say(
    server: ServerProcess,
) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        isolated = client.get_model_config("segv")["parameters"]
        trusted = client.get_model_config("trusted")["parameters"]
    limit = {"NAIAD_MEMORY_LIMIT_MIB": {"string_value": "200"}}
    assert (isolated, trusted) == (limit, {"NAIAD_INSTANCE_PROCESSES": {"string_value": "false"}})
    assert server.process is not None
    assert _grpc(server, "trusted", SERVE) == server.process.pid
    assert _http(server, "segv", SERVE) in descendants(server.process.pid)


def test_a_template_process_killed_from_outside_takes_its_model_processes_which_restart(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "segv", FAULTY_CONFIG.format(name="segv", extra=""), FAULTY_PY)
    with ServerProcess([repo]) as server:
        assert server.process is not None
        pid = _http(server, "segv", SERVE)
        (template,) = [p for p in descendants(server.process.pid) if _parent(p) == server.process.pid]
        assert "naiad.backends.python.zygote" in Path(f"/proc/{template}/cmdline").read_text()
        os.kill(template, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)  # a model process never outlives its template
        assert _served_again(server, "segv", pid) != pid  # a new template, a new model process
        assert f"(pid {pid}) stopped: " in server.log()
