"""Frontend workers as processes: what happens when one dies, when the engine dies, and on SIGTERM.

Each test finds which worker serves a connection from ``/proc`` (the worker that holds the server-side
socket of the client's port), so it can kill exactly the worker that carries a request in flight.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from tests.backends.onnxruntime.models import tensor_info
from tests.backends.onnxruntime.models import write_model as write_onnx_model
from tests.scheduling.models import wait_for
from tests.support.models import write_model
from tests.support.processes import sockets_of
from tests.support.server import EXAMPLES, ServerProcess

SLEEP_PY = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            seconds = pb_utils.get_input_tensor_by_name(request, "SECONDS").as_numpy()
            time.sleep(float(seconds[0]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SLEPT", seconds)]))
        return responses
"""


#: A new array of the size the config fixes: its model process writes it into the worker's response
#: arena, in the block the engine reserved for it.
DOUBLE_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("DOUBLED", pb_utils.get_input_tensor_by_name(r, "IMAGE").as_numpy() * 2)]
            )
            for r in requests
        ]
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("workers")
    write_model(
        root,
        "sleep",
        """
        backend: "python"
        input [{ name: "SECONDS" data_type: TYPE_FP32 dims: [ 1 ] }]
        output [{ name: "SLEPT" data_type: TYPE_FP32 dims: [ 1 ] }]
        instance_group [{ count: 4 kind: KIND_CPU }]
        """,
        SLEEP_PY,
    )
    import shutil

    shutil.copytree(EXAMPLES / "add_sub", root / "add_sub")
    image = [1, 3, 224, 224]
    write_onnx_model(
        root,
        "double",
        [helper.make_node("Add", ["IMAGE", "IMAGE"], ["DOUBLED"])],
        [tensor_info("IMAGE", TensorProto.FLOAT, image)],
        [tensor_info("DOUBLED", TensorProto.FLOAT, image)],
        """
        platform: "onnxruntime_onnx"
        input [{ name: "IMAGE" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] }]
        output [{ name: "DOUBLED" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] }]
        """,
    )
    write_model(
        root,
        "double_py",
        """
        backend: "python"
        input [{ name: "IMAGE" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] }]
        output [{ name: "DOUBLED" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] }]
        """,
        DOUBLE_PY,
    )
    return root


@pytest.fixture
def server(repo: Path) -> Iterator[ServerProcess]:
    args = ["--exit-timeout-secs=20", "--allow-client-shm=true"]
    with ServerProcess([repo], args, frontend_workers=2) as process:
        wait_for(lambda: len(workers(process)) == 2)
        yield process


def workers(server: ServerProcess) -> list[int]:
    """Pids of the server's live frontend workers."""
    assert server.process is not None
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == server.process.pid and fields[0] != "Z" and b"naiad.workers" in cmdline:
            found.append(int(entry))
    return sorted(found)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


def serving_worker(server: ServerProcess, connection: http.client.HTTPConnection) -> int:
    """The worker holding the server side of ``connection`` (matched by the client's port)."""
    client_port = connection.sock.getsockname()[1]
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == server.http_port and int(remote.split(":")[1], 16) == client_port:
            inodes.add(fields[9])
    for pid in workers(server):
        if inodes & sockets_of(pid):
            return pid
    raise AssertionError(f"no worker holds the connection from port {client_port}")


def connections_on_each_worker(server: ServerProcess) -> dict[int, http.client.HTTPConnection]:
    """One open HTTP connection per worker (the kernel spreads connections, so open a few)."""
    chosen: dict[int, http.client.HTTPConnection] = {}
    spare = []
    for _ in range(64):
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
        connection.connect()
        time.sleep(0.02)  # the worker accepts it
        pid = serving_worker(server, connection)
        if pid in chosen:
            spare.append(connection)
        else:
            chosen[pid] = connection
        if len(chosen) == 2:
            break
    for connection in spare:
        connection.close()
    assert len(chosen) == 2
    return chosen


def sleep_request(
    connection: http.client.HTTPConnection, seconds: float, results: dict[int, object], key: int
) -> None:
    body = json.dumps({"inputs": [{"name": "SECONDS", "datatype": "FP32", "shape": [1], "data": [seconds]}]})
    try:
        connection.request("POST", "/v2/models/sleep/infer", body, {"content-type": "application/json"})
        response = connection.getresponse()
        results[key] = (response.status, json.loads(response.read()))
    except (ConnectionError, http.client.HTTPException, OSError) as error:
        results[key] = error


def add_sub_works(server: ServerProcess) -> bool:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        inputs = [httpclient.InferInput(f"INPUT{i}", [4], "FP32") for i in range(2)]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
        answer = client.infer("add_sub", inputs)
        return bool((answer.as_numpy("OUTPUT0") == np.arange(4) * 2).all())
    finally:
        client.close()


def test_workers_serve_http_and_grpc_on_the_same_ports(server: ServerProcess) -> None:
    assert len(workers(server)) == 2
    assert add_sub_works(server)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert grpc.is_server_ready()
    finally:
        grpc.close()


def test_a_killed_worker_is_restarted_and_only_its_requests_fail(server: ServerProcess) -> None:
    chosen = connections_on_each_worker(server)
    victim, survivor = sorted(chosen)
    results: dict[int, object] = {}
    threads = [
        threading.Thread(target=sleep_request, args=(connection, 1.5, results, pid))
        for pid, connection in chosen.items()
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # both requests are in the engine now
    os.kill(victim, signal.SIGKILL)
    for thread in threads:
        thread.join(30)
    for connection in chosen.values():
        connection.close()
    assert isinstance(results[victim], (ConnectionError, http.client.HTTPException, OSError))
    assert results[survivor] == (
        200,
        {
            "model_name": "sleep",
            "model_version": "1",
            "outputs": [{"name": "SLEPT", "datatype": "FP32", "shape": [1], "data": [1.5]}],
        },
    )
    wait_for(lambda: len(workers(server)) == 2 and victim not in workers(server), timeout=30)
    assert not alive(victim)
    server._wait("/v2/health/ready", timeout=30)
    assert add_sub_works(server)
    assert f"(pid {victim}) ended with signal SIGKILL; 1 request(s) it had in flight failed" in server.log()


def test_not_ready_while_a_worker_is_missing(server: ServerProcess) -> None:
    victim = workers(server)[0]
    os.kill(victim, signal.SIGKILL)

    def not_ready() -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=2)
        try:
            connection.request("GET", "/v2/health/ready")
            return connection.getresponse().status == 400
        except OSError:
            return False
        finally:
            connection.close()

    wait_for(not_ready, timeout=10)
    server._wait("/v2/health/ready", timeout=30)


def test_the_engine_dying_takes_every_worker_with_it(server: ServerProcess) -> None:
    pids = workers(server)
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGKILL)
    assert server.process.wait(10) == -signal.SIGKILL
    wait_for(lambda: not any(alive(pid) for pid in pids), timeout=10)
    # (Naiad's regions are named naiad-<pid>-...: a bare substring test matched other programs' files,
    # such as a digit run inside the UUID of a Triton region left by a killed reference server)
    assert not [name for name in os.listdir("/dev/shm") if any(name.startswith(f"naiad-{pid}-") for pid in pids)]


def test_sigterm_drains_every_worker(server: ServerProcess) -> None:
    chosen = connections_on_each_worker(server)
    pids = workers(server)
    results: dict[int, object] = {}
    threads = [
        threading.Thread(target=sleep_request, args=(connection, 1.0, results, pid))
        for pid, connection in chosen.items()
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.4)
    assert server.stop(signal.SIGTERM) == 0
    for thread in threads:
        thread.join(30)
    for connection in chosen.values():
        connection.close()
    for pid in chosen:
        status, body = results[pid]  # type: ignore[misc]
        assert status == 200 and body["outputs"][0]["data"] == [1.0]
    assert not any(alive(pid) for pid in pids)
    assert "stopped" in server.log()


def test_tensors_cross_in_anonymous_memory_not_files(server: ServerProcess) -> None:
    assert add_sub_works(server)
    for pid in workers(server):
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert "/memfd:naiad-requests" in maps and "/memfd:naiad-responses" in maps
        assert "/dev/shm/" not in maps


def _post(connection: http.client.HTTPConnection, path: str, document: object) -> tuple[int, bytes]:
    connection.request("POST", path, json.dumps(document), {"content-type": "application/json"})
    response = connection.getresponse()
    return response.status, response.read()


def test_a_region_registered_through_one_worker_serves_requests_through_another(
    server: ServerProcess,
) -> None:
    key = f"workers-test-{os.getpid()}-{time.monotonic_ns()}"
    path = Path("/dev/shm") / key
    path.write_bytes(
        np.concatenate([np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)]).tobytes() + bytes(16)
    )
    first, second = connections_on_each_worker(server).values()
    try:
        register = {"key": key, "offset": 0, "byte_size": 48}
        assert _post(first, "/v2/systemsharedmemory/region/inputs/register", register) == (200, b"")

        def placed(offset: int) -> dict[str, object]:
            return {
                "shared_memory_region": "inputs",
                "shared_memory_byte_size": 16,
                "shared_memory_offset": offset,
            }

        request = {
            "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [4], "parameters": placed(0)},
                {"name": "INPUT1", "datatype": "FP32", "shape": [4], "parameters": placed(16)},
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": placed(32)}],
        }
        status, body = _post(second, "/v2/models/add_sub/infer", request)
        assert status == 200, body
        assert np.frombuffer(path.read_bytes()[32:48], dtype=np.float32).tolist() == [1.0, 2.0, 3.0, 4.0]
        assert _post(second, "/v2/systemsharedmemory/region/inputs/unregister", {}) == (200, b"")
        status, body = _post(first, "/v2/models/add_sub/infer", request)
        assert status == 404 and b"Unable to find shared memory region: 'inputs'" in body
    finally:
        first.close()
        second.close()
        path.unlink()


@pytest.mark.parametrize("model", ["double", "double_py"])
def test_large_new_outputs_reach_http_and_grpc_clients(server: ServerProcess, model: str) -> None:
    """588-KiB outputs that are no input's memory, written to the worker's response arena where they
    are made (an ONNX model's by its instance's thread, a Python model's by its model process): right
    for every request, through both protocols, over many more bytes than the arena holds (its blocks
    come back as the workers release them)."""
    rng = np.random.default_rng(0)
    http_client = httpclient.InferenceServerClient(server.http_url)
    grpc_client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for _ in range(40):  # 2 x 40 x 588 KiB: well past the 32-MiB response arena of each worker
            image = rng.random((1, 3, 224, 224), dtype=np.float32)
            by_http = httpclient.InferInput("IMAGE", [1, 3, 224, 224], "FP32")
            by_http.set_data_from_numpy(image, binary_data=True)
            answer = http_client.infer(model, [by_http])
            np.testing.assert_array_equal(answer.as_numpy("DOUBLED"), image * 2)
            by_grpc = grpcclient.InferInput("IMAGE", [1, 3, 224, 224], "FP32")
            by_grpc.set_data_from_numpy(image * 2)
            np.testing.assert_array_equal(grpc_client.infer(model, [by_grpc]).as_numpy("DOUBLED"), image * 4)
    finally:
        http_client.close()
        grpc_client.close()
