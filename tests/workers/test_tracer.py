"""Trace sampling with frontend workers: the engine's tracer counts the requests of every worker."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
from naiad.core.request import InferRequest, InferResponse
from naiad.ipc.messages import NOT_SAMPLED, ToEngine, TraceEnd
from naiad.tracing.config import parse_trace_config
from naiad.tracing.tracer import Tracer
from naiad.workers.tracer import WorkerTracer

SETTINGS = {"trace_level": ["TIMESTAMPS"], "trace_rate": ["2"], "trace_count": ["2"], "log_frequency": ["1"]}


def _engine_and_workers(trace_file: Path, workers: int) -> tuple[Tracer, list[WorkerTracer]]:
    """An engine's tracer and ``workers`` workers' tracers that hand traces back as the channel does
    (each :class:`TraceEnd` encoded and decoded as a message to the engine)."""
    config = parse_trace_config([f"triton,file={trace_file}"])
    engine = Tracer(config)
    decoder = msgspec.msgpack.Decoder(ToEngine)

    def hand_back(message: TraceEnd) -> None:
        received = decoder.decode(msgspec.msgpack.encode(message))
        assert isinstance(received, TraceEnd)
        engine.collect(received.id, received.model, received.records)

    tracers = [WorkerTracer(config, hand_back) for _ in range(workers)]
    for tracer in [engine, *tracers]:
        tracer.update("", SETTINGS)  # as the engine broadcasts a settings change
    return engine, tracers


def _serve(engine: Tracer, worker: WorkerTracer, request_id: str, reaches_engine: bool = True) -> int:
    """One request through ``worker``: its trace id in the file, or the verdict when not sampled."""
    trace = worker.begin("m", "HTTP")
    assert trace is not None  # provisional: every request is traced until the engine rules
    request = InferRequest("m", id=request_id)
    trace.received(request)
    if reaches_engine:
        assert request.timestamps is not None
        worker.verdict(request.timestamps, engine.sample("m", request.headers) or NOT_SAMPLED)
        trace.answered(InferResponse("m", "1", request_id))
    trace.sending()
    worker.end(trace)
    return trace.id


def test_rate_and_count_hold_for_the_server_not_for_each_worker(tmp_path: Path) -> None:
    engine, (first, second) = _engine_and_workers(tmp_path / "trace.json", 2)
    verdicts = [_serve(engine, worker, f"r{i}") for i, worker in enumerate([first, second] * 3)]
    # Every 2nd request of the server, twice (counted in each worker, r2 and r3 would have been: the
    # second request of each).
    assert verdicts == [NOT_SAMPLED, 1, NOT_SAMPLED, 2, NOT_SAMPLED, NOT_SAMPLED]
    assert engine.settings()["trace_count"] == "0"
    files = sorted(tmp_path.glob("trace.json.*"))
    assert [path.name for path in files] == ["trace.json.0", "trace.json.1"]
    headers = [next(r for r in json.loads(path.read_text()) if "model_name" in r) for path in files]
    assert headers == [
        {"id": 1, "model_name": "m", "model_version": 1, "request_id": "r1"},
        {"id": 2, "model_name": "m", "model_version": 1, "request_id": "r3"},
    ]


def test_a_request_refused_in_a_worker_is_counted_when_its_trace_ends(tmp_path: Path) -> None:
    engine, (worker,) = _engine_and_workers(tmp_path / "trace.json", 1)
    assert _serve(engine, worker, "refused-1", reaches_engine=False) == 0  # undecided in the worker
    assert _serve(engine, worker, "refused-2", reaches_engine=False) == 0
    (written,) = tmp_path.glob("trace.json.*")  # the engine sampled the second: rate 2
    records = json.loads(written.read_text())
    assert {r["id"] for r in records} == {1}
    assert [r["request_id"] for r in records if "model_name" in r] == ["refused-2"]
    assert engine.settings()["trace_count"] == "1"
