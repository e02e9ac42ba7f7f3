"""The watch for the next message before blocking (``NAIAD_PROCESS_SPIN_US``, and the longer one for
a client calling one request at a time, ``NAIAD_PROCESS_LONE_SPIN_US``): bounded.

A model process that answered its executions, and the engine waiting for a lone execution's
results, read their socket without sleeping for a moment before they block; a watch that did not
stop would burn a core per model process on an idle server.  Checked on a real socket pair, and on
a real server from the CPU time ``/proc`` reports for its process tree while it idles.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from naiad.backends.python.messages import LONE_STREAK, Watch, Wire
from naiad.backends.python.spec import (
    DEFAULT_LONE_SPIN_US,
    DEFAULT_SPIN_US,
    LONE_SPIN_VARIABLE,
    SPIN_VARIABLE,
    cpu_limit,
    lone_spin_seconds,
    spin_seconds,
)

from tests.support.models import write_identity
from tests.support.processes import descendants
from tests.support.server import ServerProcess

_TICK = os.sysconf("SC_CLK_TCK")


@pytest.fixture
def wires() -> Iterator[tuple[Wire, Wire]]:
    left, right = socket.socketpair()
    ours, theirs = Wire(left), Wire(right)
    yield ours, theirs
    ours.close()
    theirs.close()


def test_nothing_arriving_ends_the_watch_after_its_bound(wires: tuple[Wire, Wire]) -> None:
    ours, _ = wires
    started = time.perf_counter()
    assert ours.arrives_within(0.005) is False
    waited = time.perf_counter() - started
    assert 0.005 <= waited < 0.5


def test_a_message_sent_during_the_watch_ends_it_and_is_received_whole(wires: tuple[Wire, Wire]) -> None:
    ours, theirs = wires
    sender = threading.Timer(0.01, theirs.send, args=(("execute", 7, [1, 2, 3]),))
    sender.start()
    started = time.perf_counter()
    assert ours.arrives_within(5.0) is True
    assert time.perf_counter() - started < 4.0
    sender.join()
    assert ours.receive() == ("execute", 7, [1, 2, 3])


def test_the_peer_closing_during_the_watch_ends_it_and_the_next_read_reports_eof(
    wires: tuple[Wire, Wire],
) -> None:
    ours, theirs = wires
    theirs.send(("results", None))
    theirs.close()
    assert ours.arrives_within(1.0) is True
    assert ours.receive_ready() == [("results", None)]
    with pytest.raises(EOFError):
        ours.receive()


def test_the_setting_is_microseconds_and_zero_or_nonsense_fall_back_sensibly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SPIN_VARIABLE, "250")
    assert spin_seconds() == pytest.approx(250e-6)
    monkeypatch.setenv(SPIN_VARIABLE, "0")
    assert spin_seconds() == 0.0
    monkeypatch.setenv(SPIN_VARIABLE, "-5")
    assert spin_seconds() == 0.0
    monkeypatch.setenv(SPIN_VARIABLE, "fast")
    assert spin_seconds() == pytest.approx(DEFAULT_SPIN_US / 1e6)


def test_a_process_bound_to_one_cpu_does_not_watch_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """On one CPU the peer a watch waits for needs that CPU: no watch by default, the setting still wins."""
    monkeypatch.delenv(SPIN_VARIABLE, raising=False)
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs a machine with two CPUs or more")
    assert DEFAULT_SPIN_US > 0 and spin_seconds() == pytest.approx(DEFAULT_SPIN_US / 1e6)
    command = [
        sys.executable,
        "-c",
        "from naiad.backends.python.spec import spin_seconds; print(spin_seconds())",
    ]
    one_cpu = ["taskset", "-c", str(min(os.sched_getaffinity(0))), *command]
    assert float(subprocess.run(one_cpu, capture_output=True, text=True, check=True).stdout) == 0.0
    env = {**os.environ, SPIN_VARIABLE: "50"}
    assert float(subprocess.run(one_cpu, capture_output=True, text=True, check=True, env=env).stdout) == 50e-6


def test_the_long_watch_needs_a_streak_of_lone_executions_and_one_other_ends_it() -> None:
    """One client calling one request at a time: every execution is the server's only request, and
    after a few of them the model process watches for as long as the client's round trip.  Under
    load a lone execution now and then starts nothing, and the first one that is not ends it."""
    watch = Watch(200e-6, 1000e-6)
    for _ in range(LONE_STREAK - 1):
        watch.executed(True)
        assert watch.current() == 200e-6
    watch.executed(True)
    assert watch.current() == 1000e-6
    watch.executed(False)
    assert watch.current() == 200e-6
    assert Watch(500e-6, 100e-6).lone == 500e-6  # never shorter than the short watch
    assert Watch(0.0, 1000e-6).lone == 0.0  # off with it
    watch.waited(2000e-6)  # the last wait was longer than any watch: none
    assert not watch.worth_it() and not watch.worth_it(1000e-6)
    watch.waited(500e-6)
    assert not watch.worth_it() and watch.worth_it(1000e-6)


def test_the_long_watch_is_microseconds_and_off_with_the_short_one(monkeypatch: pytest.MonkeyPatch) -> None:
    limit = cpu_limit(Path("/sys/fs/cgroup"))
    if len(os.sched_getaffinity(0)) < 2 or (limit is not None and limit < 2):
        pytest.skip("needs two CPUs or more")
    monkeypatch.delenv(SPIN_VARIABLE, raising=False)
    monkeypatch.delenv(LONE_SPIN_VARIABLE, raising=False)
    assert lone_spin_seconds() == pytest.approx(DEFAULT_LONE_SPIN_US / 1e6)
    monkeypatch.setenv(LONE_SPIN_VARIABLE, "700")
    assert lone_spin_seconds() == pytest.approx(700e-6)
    monkeypatch.setenv(SPIN_VARIABLE, "0")
    assert lone_spin_seconds() == 0.0


def test_a_cpu_limit_is_read_from_the_cgroup(tmp_path: Path) -> None:
    """A pod's ``resources.limits.cpu`` is its cgroup's CFS quota: under two CPUs nothing watches by
    default (a watch would spend the quota and have the pod throttled)."""
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("150000 100000\n")
    assert cpu_limit(v2) == 1.5
    (v2 / "cpu.max").write_text("max 100000\n")
    assert cpu_limit(v2) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("400000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpu_limit(v1) == 4.0
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_limit(v1) is None
    assert cpu_limit(tmp_path / "none") is None


def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / _TICK


@pytest.mark.parametrize("spin", ["5000", "0", None])
def test_an_idle_server_after_a_burst_of_requests_uses_almost_no_cpu(tmp_path: Path, spin: str | None) -> None:
    """Even with a watch of 5 ms (50 times the 100 us the benchmark tried), or the defaults' long watch
    after 200 lone executions, the server's whole tree, its model process included, is back to sleep
    within a moment of its last request: over 2 s it uses at most 0.15 CPU-seconds, where one watch
    that never stopped would use about 2."""
    repo = tmp_path / "repo"
    write_identity(repo, "identity", "TYPE_FP32")
    with ServerProcess([repo], env={} if spin is None else {SPIN_VARIABLE: spin}) as served:
        assert served.process is not None
        with httpclient.InferenceServerClient(served.http_url.removeprefix("http://")) as client:
            data = np.arange(4, dtype=np.float32)
            tensor = httpclient.InferInput("INPUT0", [4], "FP32")
            tensor.set_data_from_numpy(data)
            for _ in range(200):  # one at a time: every execution ends with a watch on both sides
                result = client.infer("identity", [tensor])
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
        tree = [served.process.pid, *descendants(served.process.pid)]
        assert len(tree) >= 3  # the engine, the template, the model process
        time.sleep(0.5)
        before = _cpu_seconds(tree)
        time.sleep(2.0)
        assert _cpu_seconds(tree) - before <= 0.15


def test_a_model_called_less_often_than_the_watch_lasts_stops_watching(tmp_path: Path) -> None:
    """Each side watches only while its last wait was shorter than the watch: a model called every
    15 ms with a 5 ms watch blocks at once after the first long wait, so 100 calls cost its process
    a few milliseconds of CPU, not the 0.5 s that 100 watches ending in a block anyway would."""
    repo = tmp_path / "repo"
    write_identity(repo, "identity", "TYPE_FP32")
    with ServerProcess([repo], env={SPIN_VARIABLE: "5000"}) as served:
        assert served.process is not None
        with httpclient.InferenceServerClient(served.http_url.removeprefix("http://")) as client:
            data = np.arange(4, dtype=np.float32)
            tensor = httpclient.InferInput("INPUT0", [4], "FP32")
            tensor.set_data_from_numpy(data)
            client.infer("identity", [tensor])
            models = descendants(served.process.pid)  # the template and the model process
            assert len(models) == 2
            time.sleep(0.1)
            before = _cpu_seconds(models)
            for _ in range(100):
                time.sleep(0.015)
                result = client.infer("identity", [tensor])
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
            assert _cpu_seconds(models) - before <= 0.2
