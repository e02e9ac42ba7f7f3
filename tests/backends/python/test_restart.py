"""A Python model's process that dies is restarted, as Triton restarts an unhealthy stub.

The model runs in model processes (``count: 2``, or the default single instance) and calls
``os._exit(3)`` when asked.  Its answers carry a per-process execution counter and the process id,
so a restart shows as a new pid whose counter starts again.  (Signals, hangs, memory limits and the
crash loop are in ``test_isolation.py``.)
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.models import write_identity, write_model
from tests.support.server import ServerProcess

CRASH, SERVE, MEET = 0, 1, 2

# ``INPUT0`` is ``[action, round]``; ``OUTPUT0`` is ``[round, executions of this process, pid]``.
CRASHING_PY = """
import os
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

WORK = Path({work!r})
CRASH, SERVE, MEET = 0, 1, 2


class TritonPythonModel:
    def initialize(self, args):
        if (WORK / "refuse").exists():
            raise RuntimeError("the refuse flag file is present")
        self.executions = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            action, round_ = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy().tolist()
            if action == CRASH:
                os._exit(3)
            if action == MEET:
                self.meet(round_)
            self.executions += 1
            out = np.array([round_, self.executions, os.getpid()], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses

    def meet(self, round_):
        # Wait for the other instance to run a request of this round too: a round uses both.
        folder = WORK / f"round-{{round_}}"
        folder.mkdir(exist_ok=True)
        (folder / str(os.getpid())).touch()
        deadline = time.monotonic() + 60
        while len(list(folder.iterdir())) < 2:
            if time.monotonic() > deadline:
                raise pb_utils.TritonModelException(f"round {{round_}}: the other instance never came")
            time.sleep(0.01)
"""

CRASHING_CONFIG = """
name: "crashy"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_INT64 dims: [ 2 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 3 ] }}]
instance_group [{{ kind: KIND_CPU count: {count} }}]
"""

STOPPED = "its model process stopped while executing: exit status 3"


def _repository(tmp_path: Path, count: int) -> tuple[Path, Path]:
    """A repository with ``crashy`` (``count`` worker processes) and an in-process ``identity``;
    and the folder ``crashy`` keeps its flag file and meeting rounds in."""
    repo, work = tmp_path / "repo", tmp_path / "work"
    work.mkdir()
    config = CRASHING_CONFIG.format(count=count)
    write_model(repo, "crashy", config, CRASHING_PY.format(work=str(work)))
    write_identity(repo, "identity", "TYPE_FP32")
    return repo, work


def _infer(server: ServerProcess, action: int, round_: int = 0) -> list[int]:
    with httpclient.InferenceServerClient(
        server.http_url, connection_timeout=120.0, network_timeout=120.0
    ) as client:
        tensor = httpclient.InferInput("INPUT0", [2], "INT64")
        tensor.set_data_from_numpy(np.array([action, round_], dtype=np.int64))
        output = client.infer("crashy", [tensor]).as_numpy("OUTPUT0")
    assert output is not None
    return [int(value) for value in output]


def _failure(server: ServerProcess, action: int) -> str:
    with pytest.raises(InferenceServerException) as caught:
        _infer(server, action)
    return str(caught.value.message())


def _meet(server: ServerProcess, round_: int) -> list[list[int]]:
    """Two concurrent requests that each wait for the other, so both instances run one."""
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda _: _infer(server, MEET, round_), range(2)))


def _identity_serves(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=120.0) as client:
        data = np.arange(4, dtype=np.float32)
        tensor = httpclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(data)
        np.testing.assert_array_equal(client.infer("identity", [tensor]).as_numpy("OUTPUT0"), data)


def test_a_worker_process_that_dies_fails_its_request_and_is_restarted(tmp_path: Path) -> None:
    repo, _ = _repository(tmp_path, count=2)
    with ServerProcess([repo]) as server:
        before = _meet(server, 1)
        assert sorted(executions for _, executions, _ in before) == [1, 1]
        pids = {pid for _, _, pid in before}
        assert len(pids) == 2

        message = _failure(server, CRASH)
        assert message.startswith("Stub process 'crashy_0_"), message
        assert STOPPED in message
        _identity_serves(server)

        time.sleep(1.0)  # the restart waits 0.1 s, then loads the model again
        after = _meet(server, 2)
        restarted = [answer for answer in after if answer[2] not in pids]
        survived = [answer for answer in after if answer[2] in pids]
        assert [executions for _, executions, _ in restarted] == [1]  # a new process counts afresh
        assert [executions for _, executions, _ in survived] == [2]
        serving = {restarted[0][2], survived[0][2]}
        for _ in range(6):
            assert _infer(server, SERVE)[2] in serving
        _identity_serves(server)
        assert server.stop() == 0
        log = server.log()
        assert "model 'crashy' instance 'crashy_0_" in log
        assert "stopped: exit status 3" in log
        assert "restarted the model process of model 'crashy' instance 'crashy_0_" in log


def _until_logged(server: ServerProcess, line: str, count: int = 1) -> None:
    deadline = time.monotonic() + 20
    while server.log().count(line) < count:
        assert time.monotonic() < deadline, server.log()[-4000:]
        time.sleep(0.01)


def test_requests_go_to_the_instance_that_serves_while_the_other_restarts(tmp_path: Path) -> None:
    """Of two instances, one whose process is restarting (here: cannot load its model yet) is
    passed over while the other serves: the crash fails only the request the process held, and
    every request meanwhile is answered (Triton 2.51 fails every other one with "Stub process
    'crashy_0_0' is not healthy.", checked side by side)."""
    repo, work = _repository(tmp_path, count=2)
    with ServerProcess([repo]) as server:
        pids = {pid for _, _, pid in _meet(server, 1)}
        assert len(pids) == 2
        (work / "refuse").touch()
        assert STOPPED in _failure(server, CRASH)
        _until_logged(server, "restarting failed")  # its process is down, and stays down for now
        served = {_infer(server, SERVE)[2] for _ in range(10)}
        assert len(served) == 1 and served < pids, (served, pids)
        (work / "refuse").unlink()  # a later attempt loads (0.2, then 0.4 s after the failed one)
        _until_logged(server, "restarted the model process of model 'crashy'")
        after = _meet(server, 2)  # both instances serve again: each runs one of two that meet
        assert len({pid for _, _, pid in after} - pids) == 1
        assert server.stop() == 0


def test_a_restart_that_cannot_load_reports_why_until_a_later_attempt_loads(tmp_path: Path) -> None:
    """Requests fail with the reason meanwhile, and the model is not ready, as Triton's is while its
    stub is not alive (its readiness asks each instance, Triton 25.12+)."""
    repo, work = _repository(tmp_path, count=1)
    with ServerProcess([repo], ["--log-verbose=1"]) as server:
        _, executions, pid = _infer(server, SERVE)
        assert executions == 1
        assert _model_ready(server)
        (work / "refuse").touch()
        assert STOPPED in _failure(server, CRASH)
        deadline = time.monotonic() + 20
        while "the refuse flag file is present" not in (message := _failure(server, SERVE)):
            assert "is not healthy" in message
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert message.startswith("Stub process 'crashy_0_0' is not healthy."), message
        assert "restarting failed" in message
        assert not _model_ready(server)
        _until_logged(server, "Model 'crashy' version 1 is not ready: Stub process 'crashy_0_0' is not healthy.")
        _identity_serves(server)
        (work / "refuse").unlink()  # the next attempt (0.2 s later, then 0.4 s) loads
        while True:
            try:
                _, executions, new_pid = _infer(server, SERVE)
                break
            except InferenceServerException as exc:
                assert "is not healthy" in str(exc.message())
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert (executions, new_pid != pid) == (1, True)
        assert _model_ready(server)
        assert server.stop() == 0
        assert "model 'crashy' instance 'crashy_0_0': restarting failed" in server.log()


def _model_ready(server: ServerProcess) -> bool:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=30) as client:
        ready: bool = client.is_model_ready("crashy")
        return ready
