"""Triton's scheduler start delays (``TRITONSERVER_DELAY_SCHEDULER``,
``TRITONSERVER_BACKLOG_DELAY_SCHEDULER``): a real server started with them holds each model's first
executions until that many requests wait, then runs them as its batching rules say.

What the probe model reports (the requests of its execution, the execution's ordinal) shows which
requests ran together; a request that must still be held is checked not answered after ``SETTLE``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from naiad.scheduling.start_delay import StartDelay

from tests.scheduling.models import SETTLE, infer, outputs, write_probe
from tests.support.http import RawResponse
from tests.support.server import ServerProcess

DIRECT = "sequence_batching { max_sequence_idle_microseconds: 60000000 direct { } }"
OLDEST = "sequence_batching { max_sequence_idle_microseconds: 60000000 oldest { max_candidate_sequences: 4 } }"


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8) as executor:
        yield executor


@pytest.fixture(scope="module")
def delayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose schedulers wait for 3 requests."""
    repo = tmp_path_factory.mktemp("start-delay")
    write_probe(repo, "batched", extra="dynamic_batching { }")
    write_probe(repo, "plain")
    write_probe(repo, "ordered")
    write_probe(repo, "direct", max_batch_size=2, extra=DIRECT)
    write_probe(repo, "oldest", max_batch_size=4, extra=OLDEST)
    with ServerProcess([repo], env={"TRITONSERVER_DELAY_SCHEDULER": "3"}) as server:
        yield server


def send(
    pool: ThreadPoolExecutor, server: ServerProcess, model: str, request_id: str, **parameters: Any
) -> Future[RawResponse]:
    return pool.submit(infer, server.http_url, model, request_id, **parameters)


def held(future: Future[RawResponse]) -> bool:
    """Whether ``future`` is still unanswered once the server had time to answer it."""
    try:
        future.result(timeout=SETTLE)
    except TimeoutError:
        return True
    return False


def test_the_environment_is_read_as_triton_reads_it() -> None:
    variables = {"TRITONSERVER_DELAY_SCHEDULER": " 12ms", "TRITONSERVER_BACKLOG_DELAY_SCHEDULER": "two"}
    assert StartDelay.from_environ(variables) == StartDelay(queued=12, backlog=0)
    assert StartDelay.from_environ({"TRITONSERVER_DELAY_SCHEDULER": "-4"}) == StartDelay()
    assert not StartDelay.from_environ({})


def test_the_dynamic_batcher_batches_the_requests_it_waited_for(
    delayed: ServerProcess, pool: ThreadPoolExecutor
) -> None:
    first = send(pool, delayed, "batched", "b1")
    assert held(first)
    second = send(pool, delayed, "batched", "b2")
    assert held(second) and not first.done()
    third = send(pool, delayed, "batched", "b3")
    answers = [outputs(f.result(timeout=30)) for f in (first, second, third)]
    assert [a["REQUESTS"] for a in answers] == [[3], [3], [3]]
    # and from then on the batcher runs as usual: a lone request runs alone, at once
    assert outputs(infer(delayed.http_url, "batched", "b4"))["REQUESTS"] == [1]


def test_the_default_scheduler_waits_then_runs_one_request_at_a_time(
    delayed: ServerProcess, pool: ThreadPoolExecutor
) -> None:
    futures = [send(pool, delayed, "plain", "p1"), send(pool, delayed, "plain", "p2")]
    assert held(futures[1]) and not futures[0].done()
    futures.append(send(pool, delayed, "plain", "p3"))
    answers = [outputs(f.result(timeout=30)) for f in futures]
    assert [a["REQUESTS"] for a in answers] == [[1], [1], [1]]
    assert sorted(a["EXECUTION"][0] for a in answers) == [1, 2, 3]


def test_requests_after_the_delay_run_after_those_it_held(
    delayed: ServerProcess, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    """The default scheduler is first come, first served: once the delay ends, a request that comes
    while the held ones still wait for the instance runs after them (an ensemble step feeding a
    sequence model relies on it: NVIDIA's L0_sequence_batcher test_backlog)."""
    gate = tmp_path / "gate"
    futures = [send(pool, delayed, "ordered", "q1", gate=str(gate))]
    assert held(futures[0])  # (each one queued before the next is sent: they arrive in order)
    futures.append(send(pool, delayed, "ordered", "q2"))
    assert held(futures[1])
    futures.append(send(pool, delayed, "ordered", "q3"))  # the first runs, and waits at the gate
    deadline = time.monotonic() + 30
    while not Path(f"{gate}.entered").exists():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    futures.append(send(pool, delayed, "ordered", "q4"))
    assert held(futures[3])
    gate.touch()
    answers = [outputs(f.result(timeout=30)) for f in futures]
    assert [a["EXECUTION"] for a in answers] == [[1], [2], [3], [4]]


def test_a_direct_sequence_batch_waits_for_requests_in_its_slots(
    delayed: ServerProcess, pool: ThreadPoolExecutor
) -> None:
    one = send(pool, delayed, "direct", "s1-a", sequence_id=1, sequence_start=True)
    two = send(pool, delayed, "direct", "s2-a", sequence_id=2, sequence_start=True, sequence_end=True)
    assert held(two) and not one.done()
    three = send(pool, delayed, "direct", "s1-b", sequence_id=1, sequence_end=True)
    answers = [outputs(f.result(timeout=30)) for f in (one, two, three)]
    # the two sequences' first requests run as one batch (one per slot), then the second of sequence 1
    assert [a["REQUESTS"] for a in answers[:2]] == [[2], [2]]
    assert answers[0]["EXECUTION"] == answers[1]["EXECUTION"] == [1]
    assert answers[2]["EXECUTION"] == [2]


def test_an_oldest_sequence_batch_waits_for_ready_sequences(
    delayed: ServerProcess, pool: ThreadPoolExecutor
) -> None:
    futures = [
        send(pool, delayed, "oldest", f"o{n}", sequence_id=n, sequence_start=True, sequence_end=True)
        for n in (1, 2)
    ]
    assert held(futures[1]) and not futures[0].done()
    futures.append(send(pool, delayed, "oldest", "o3", sequence_id=3, sequence_start=True, sequence_end=True))
    answers = [outputs(f.result(timeout=30)) for f in futures]
    assert [a["REQUESTS"] for a in answers] == [[3], [3], [3]]


def test_a_direct_sequence_batcher_waits_for_its_backlog(tmp_path: Path, pool: ThreadPoolExecutor) -> None:
    """One slot: the second sequence waits in the backlog, and only then does the first run.  The
    engine reads the environment in both modes: here with frontend workers."""
    write_probe(tmp_path, "direct", max_batch_size=1, extra=DIRECT)
    env = {"TRITONSERVER_DELAY_SCHEDULER": "1", "TRITONSERVER_BACKLOG_DELAY_SCHEDULER": "1"}
    with ServerProcess([tmp_path], env=env, frontend_workers=2) as server:
        first = send(pool, server, "direct", "s1-a", sequence_id=1, sequence_start=True)
        assert held(first)
        second = send(pool, server, "direct", "s2", sequence_id=2, sequence_start=True, sequence_end=True)
        assert outputs(first.result(timeout=30))["EXECUTION"] == [1]
        assert held(second)  # its sequence has no slot until sequence 1 ends
        last = send(pool, server, "direct", "s1-b", sequence_id=1, sequence_end=True)
        assert outputs(last.result(timeout=30))["EXECUTION"] == [2]
        assert outputs(second.result(timeout=30))["EXECUTION"] == [3]
        assert "Delaying scheduler until 1 backlog queued requests..." in server.log()
