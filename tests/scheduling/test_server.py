"""Triton's scheduling semantics end to end: a real server, purpose-made models, HTTP clients.

Requests are held at a gate (a model execution blocked on a file) to build up a queue, then released;
what the model reports about each execution (requests, rows, ordinal, process) shows what the
scheduler did.  The only waits are generous bounds for requests to reach the queue.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.scheduling.models import (
    SETTLE,
    Gate,
    executed,
    infer,
    outputs,
    send_and_abandon,
    wait_for,
    write_probe,
)
from tests.support import modes
from tests.support.http import RawResponse
from tests.support.server import ServerProcess

# Priorities, timeouts, queue policies and cancellation answer the same in both server modes.
frontend_workers = modes.frontend_workers


@pytest.fixture
def pool() -> Any:
    with ThreadPoolExecutor(16) as executor:
        yield executor


def held(
    pool: ThreadPoolExecutor, server: ServerProcess, model: str, tmp_path: Path
) -> tuple[Gate, Future[RawResponse]]:
    """Occupy the model's single instance with a request blocked at a gate."""
    gate = Gate(tmp_path)
    first = pool.submit(infer, server.http_url, model, f"gate-{gate.path.name}", **gate.params)
    gate.wait_entered()
    return gate, first


def queue_up(pool: ThreadPoolExecutor, calls: list[Callable[[], RawResponse]]) -> list[Future[RawResponse]]:
    futures = [pool.submit(call) for call in calls]
    time.sleep(SETTLE)
    return futures


def test_queued_requests_run_as_one_batch_split_back_per_request(
    server: ServerProcess, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    gate, first = held(pool, server, "batcher", tmp_path)
    futures = queue_up(
        pool, [lambda i=i: infer(server.http_url, "batcher", f"b{i}", value=i) for i in range(6)]
    )
    gate.open()
    assert first.result().status == 200
    for i, future in enumerate(futures):
        out = outputs(future.result())
        assert out["OUTPUT0"] == [i]  # each request gets its own rows back
        assert (out["REQUESTS"], out["ROWS"]) == ([6], [6])


def test_a_batch_never_exceeds_max_batch_size(
    server: ServerProcess, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    gate, _ = held(pool, server, "batcher", tmp_path)
    rows = [3, 3, 3, 1, 2, 5]
    futures = queue_up(
        pool,
        [lambda i=i, n=n: infer(server.http_url, "batcher", f"m{i}", rows=n) for i, n in enumerate(rows)],
    )
    gate.open()
    results = [outputs(f.result()) for f in futures]
    rows_by_execution: dict[int, int] = {}
    for result, n in zip(results, rows, strict=True):
        execution = result["EXECUTION"][0]
        rows_by_execution[execution] = rows_by_execution.get(execution, 0) + n
        assert result["ROWS"][0] <= 8
    assert sum(rows_by_execution.values()) == 17 and max(rows_by_execution.values()) <= 8
    assert len(rows_by_execution) < len(rows)  # and they did share executions


def test_the_largest_preferred_batch_size_is_formed(
    server: ServerProcess, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    gate, _ = held(pool, server, "preferred", tmp_path)
    futures = queue_up(pool, [lambda i=i: infer(server.http_url, "preferred", f"p{i}") for i in range(7)])
    gate.open()
    sizes = sorted({(r["EXECUTION"][0], r["ROWS"][0]) for r in (outputs(f.result()) for f in futures)})
    assert [rows for _, rows in sizes] == [4, 2, 1]  # preferred [2, 4] out of 7 queued


def test_the_batcher_waits_at_most_the_queue_delay(server: ServerProcess, pool: ThreadPoolExecutor) -> None:
    start = time.monotonic()
    alone = outputs(infer(server.http_url, "delayed", "alone"))
    elapsed = time.monotonic() - start
    assert alone["REQUESTS"] == [1]
    assert 0.45 <= elapsed < 5.0  # waited for company for its 0.5 s delay, then ran alone
    futures = [pool.submit(infer, server.http_url, "delayed", f"d{i}") for i in range(8)]
    full = [outputs(f.result()) for f in futures]
    assert all(r["ROWS"] == [8] for r in full)  # a full batch does not wait for the delay


def test_priorities_are_served_in_order_under_contention(
    server: ServerProcess, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    gate, _ = held(pool, server, "prioritized", tmp_path)
    sent = {}
    for name, priority in (("low1", 2), ("default", 0), ("high1", 1), ("low2", 2), ("high2", 1)):
        sent[name] = pool.submit(infer, server.http_url, "prioritized", name, priority=priority)
        time.sleep(0.1)  # arrival order is the order above
    time.sleep(SETTLE)
    gate.open()
    order = {name: outputs(future.result())["EXECUTION"][0] for name, future in sent.items()}
    assert sorted(order, key=order.__getitem__) == ["high1", "high2", "low1", "default", "low2"]


def test_a_full_queue_rejects_with_503(
    server: ServerProcess, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    gate, _ = held(pool, server, "bounded", tmp_path)
    futures = queue_up(pool, [lambda i=i: infer(server.http_url, "bounded", f"q{i}") for i in range(2)])
    overflow = infer(server.http_url, "bounded", "overflow")
    assert (overflow.status, overflow.error) == (503, "Exceeds maximum queue size")
    gate.open()
    assert [f.result().status for f in futures] == [200, 200]


def test_queued_requests_time_out_with_503(
    server: ServerProcess, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    gate, _ = held(pool, server, "expiring", tmp_path)
    start = time.monotonic()
    default = pool.submit(infer, server.http_url, "expiring", "default-timeout")
    short = pool.submit(infer, server.http_url, "expiring", "short-timeout", timeout=100000)
    longer = pool.submit(infer, server.http_url, "expiring", "long-timeout", timeout=10**9)  # cannot lengthen
    for future in (short, default, longer):
        response = future.result()
        assert (response.status, response.error) == (503, "Request timeout expired")
    assert time.monotonic() - start < 10
    gate.open()
    assert not {"default-timeout", "short-timeout", "long-timeout"} & set(executed_ids(server, "expiring"))


def executed_ids(server: ServerProcess, model: str) -> list[str]:
    return executed(Path(server.repositories[0]) / model)


def test_delay_policy_serves_timed_out_requests_last(
    server: ServerProcess, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    gate, _ = held(pool, server, "delaying", tmp_path)
    late = pool.submit(infer, server.http_url, "delaying", "late", timeout=100000)
    time.sleep(SETTLE)  # "late" times out in the queue and moves behind "patient"
    patient = pool.submit(infer, server.http_url, "delaying", "patient")
    time.sleep(SETTLE)
    gate.open()
    assert outputs(patient.result())["EXECUTION"][0] < outputs(late.result())["EXECUTION"][0]


@pytest.mark.parametrize(("model", "second_first"), [("ordered", False), ("unordered", True)])
def test_preserve_ordering(
    server: ServerProcess, pool: ThreadPoolExecutor, tmp_path: Path, model: str, second_first: bool
) -> None:
    gate, slow = held(pool, server, model, tmp_path)  # one instance holds the first request at the gate
    fast = pool.submit(infer, server.http_url, model, f"{model}-fast")  # the other instance runs it at once
    wait_for(lambda: f"{model}-fast" in executed_ids(server, model))
    try:
        if second_first:
            assert fast.result(timeout=30).status == 200  # answered while the first is still held
        else:
            time.sleep(SETTLE)  # time enough to answer it, were its answer not held behind the first one's
            assert not fast.done()
    finally:
        gate.open()
    assert slow.result().status == 200 and fast.result().status == 200


def test_count_2_python_instances_compute_at_once_in_two_processes(
    server: ServerProcess, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    barrier = str(tmp_path / "barrier")
    futures = [
        pool.submit(infer, server.http_url, "parallel", f"party{i}", barrier=barrier, parties=2)
        for i in range(2)
    ]
    pids = {outputs(f.result())["PID"][0] for f in futures}  # both ran only if they overlapped
    assert len(pids) == 2 and server.process is not None and server.process.pid not in pids


def test_a_request_whose_client_left_never_reaches_the_model(
    server: ServerProcess, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    gate, first = held(pool, server, "batcher", tmp_path)
    send_and_abandon(server.http_url, "batcher", "abandoned")
    time.sleep(SETTLE)  # the server notices the disconnect and takes the request out of the queue
    gate.open()
    assert first.result().status == 200
    assert outputs(infer(server.http_url, "batcher", "afterwards"))["REQUESTS"] == [1]
    log = executed_ids(server, "batcher")
    assert "afterwards" in log and "abandoned" not in log


@pytest.mark.parametrize("model", ["watcher", "watcher_process"])
def test_a_running_model_sees_is_cancelled(server: ServerProcess, model: str) -> None:
    name = f"{model}-watched"
    send_and_abandon(server.http_url, model, name, linger=0.0, watch_cancel=True)  # closes at once...
    wait_for(
        lambda: (
            f"{name} cancelled" in executed_ids(server, model)
            or f"{name} timeout" in executed_ids(server, model)
        )
    )
    assert f"{name} cancelled" in executed_ids(server, model)


def test_per_request_errors_fail_only_their_request(
    server: ServerProcess, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    gate, _ = held(pool, server, "batcher", tmp_path)
    futures = queue_up(
        pool,
        [
            lambda: infer(server.http_url, "batcher", "ok1"),
            lambda: infer(server.http_url, "batcher", "invalid", fail=True),
            lambda: infer(server.http_url, "batcher", "ok2"),
        ],
    )
    gate.open()
    ok1, invalid, ok2 = (f.result() for f in futures)
    assert outputs(ok1)["REQUESTS"] == [3] and outputs(ok2)["REQUESTS"] == [3]
    assert (invalid.status, invalid.error) == (400, "this request is invalid")


def test_a_backend_exception_fails_its_batch_with_internal(
    server: ServerProcess, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    gate, first = held(pool, server, "batcher", tmp_path)
    futures = queue_up(
        pool,
        [
            lambda: infer(server.http_url, "batcher", "victim"),
            lambda: infer(server.http_url, "batcher", "breaker", **{"raise": True}),
        ],
    )
    gate.open()
    assert first.result().status == 200
    for future in futures:
        response = future.result()
        assert response.status == 500
        assert "RuntimeError: the batch is broken" in response.error
    assert outputs(infer(server.http_url, "batcher", "recovered"))["REQUESTS"] == [1]


def test_onnx_batches_are_split_back_per_request(server: ServerProcess, pool: ThreadPoolExecutor) -> None:
    def call(value: int) -> tuple[int, Any]:
        with httpclient.InferenceServerClient(server.http_url) as client:
            a = np.full((1, 16), value, dtype=np.int32)
            b = np.arange(16, dtype=np.int32).reshape(1, 16)
            inputs = [
                httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                httpclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            result = client.infer("onnx_batched", inputs)
            return value, (result.as_numpy("OUTPUT0"), a + b, result.as_numpy("OUTPUT1"), a - b)

    for _, (total, want_total, difference, want_difference) in pool.map(call, range(24)):
        np.testing.assert_array_equal(total, want_total)
        np.testing.assert_array_equal(difference, want_difference)


def test_sigterm_finishes_queued_requests_before_exit(
    tmp_path: Path, pool: ThreadPoolExecutor, frontend_workers: int
) -> None:
    repo = tmp_path / "repo"
    write_probe(repo, "draining", max_batch_size=1, extra="dynamic_batching { }")
    with ServerProcess([repo], frontend_workers=frontend_workers) as server:
        gate, first = held(pool, server, "draining", tmp_path)
        futures = queue_up(
            pool, [lambda i=i: infer(server.http_url, "draining", f"drain{i}") for i in range(3)]
        )
        assert server.process is not None
        server.process.send_signal(signal.SIGTERM)
        time.sleep(SETTLE)
        gate.open()
        assert [f.result().status for f in [first, *futures]] == [200] * 4
        assert server.process.wait(30) == 0
