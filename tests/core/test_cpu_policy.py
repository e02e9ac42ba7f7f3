"""``--cpu-policy``: every thread of every process of a running server (the engine, its frontend
workers, its model processes) runs under the policy asked for, and the server answers under it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.support.models import write_identity
from tests.support.server import ServerProcess

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux only")


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process under it, from ``/proc``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):  # gone since listed
                continue
    found, frontier = [pid], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _policies(pids: list[int]) -> dict[str, set[int]]:
    """``{"command line of a process": {the policy of each of its threads}}``."""
    seen: dict[str, set[int]] = {}
    for pid in pids:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                seen.setdefault(f"{pid} {cmdline}", set()).add(os.sched_getscheduler(int(task.name)))
            except ProcessLookupError:
                continue
    return seen


@contextmanager
def _started_under(policy: int) -> Iterator[None]:
    """Processes started in the block begin under ``policy`` (inherited from this thread, as a launcher's
    policy is): a server told otherwise must change it, not keep what it was given."""
    before = os.sched_getscheduler(0)
    os.sched_setscheduler(0, policy, os.sched_param(0))
    try:
        yield
    finally:
        os.sched_setscheduler(0, before, os.sched_param(0))


def _answers(server: ServerProcess) -> None:
    data = np.arange(4, dtype=np.float32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer("identity", [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_batch_by_default_in_every_thread_of_engine_workers_and_model_processes(tmp_path: Path) -> None:
    write_identity(tmp_path, "identity", "TYPE_FP32")
    with _started_under(os.SCHED_OTHER), ServerProcess([tmp_path], frontend_workers=1) as server:
        _answers(server)  # the worker's gRPC threads and the model process are up
        assert server.process is not None
        seen = _policies(_descendants(server.process.pid))
    commands = " | ".join(seen)
    assert "naiad.workers" in commands and "naiad.backends.python" in commands, commands
    assert all(policies == {os.SCHED_BATCH} for policies in seen.values()), seen


def test_normal_from_the_environment_even_under_a_batch_launcher(tmp_path: Path) -> None:
    write_identity(tmp_path, "identity", "TYPE_FP32")
    env = {"NAIAD_CPU_POLICY": "normal"}
    with _started_under(os.SCHED_BATCH), ServerProcess([tmp_path], env=env) as server:
        _answers(server)
        assert server.process is not None
        seen = _policies(_descendants(server.process.pid))
    assert len(seen) >= 2, seen  # the engine and its model process
    assert all(policies == {os.SCHED_OTHER} for policies in seen.values()), seen


def test_a_policy_it_does_not_know_is_refused_before_serving(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "naiad", "serve", f"--model-repository={tmp_path}"],
        env=dict(os.environ, NAIAD_CPU_POLICY="realtime"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "argument --cpu-policy: expected one of batch, normal, got 'realtime'" in result.stderr
