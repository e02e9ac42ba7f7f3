"""The load generator: tritonclient processes (HTTP and gRPC) sending Zipf-distributed requests.

Each client is its own process (the GIL would otherwise serialize the clients with each other and with
the bookkeeping) and paces itself to a fixed request rate, so that latency is measured against a
steady offered load instead of a closed loop that saturates the two cores.  Every answer is checked;
any exception or wrong value is a failed request, kept with its message.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.density.models import WIDTH, Kind


@dataclass(frozen=True)
class Client:
    """One client process: its protocol, the servers it spreads requests over (as a Service would),
    the models with their Zipf weights, and its pace."""

    protocol: str  # "http" | "grpc"
    endpoints: tuple[tuple[int, int], ...]  # (http port, grpc port) per server
    models: tuple[str, ...]
    weights: tuple[float, ...]
    kinds: dict[str, Kind]
    duration: float
    rate: float
    seed: int


#: (model, sent at, answered at, error or "", index of the server it was sent to) with wall-clock
#: times (time.time()), to match the servers' logs.
Record = tuple[str, float, float, str, int]


def zipf_weights(n: int, s: float) -> list[float]:
    return [1.0 / (rank**s) for rank in range(1, n + 1)]


def _run(job: tuple[Client, Any]) -> list[Record]:
    client, barrier = job
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    rng = random.Random(client.seed)
    x = np.arange(WIDTH, dtype=np.float32).reshape(1, WIDTH) / WIDTH
    if client.protocol == "http":
        module = httpclient
        handles = [
            httpclient.InferenceServerClient(f"127.0.0.1:{http}", connection_timeout=120, network_timeout=120)
            for http, _ in client.endpoints
        ]
    else:
        module = grpcclient  # type: ignore[assignment]
        handles = [grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}") for _, grpc in client.endpoints]
    records: list[Record] = []
    turn = rng.randrange(len(handles))
    # every client is started (spawned, imported, connected) before any sends: a process still
    # importing would take CPU from the others' first requests
    barrier.wait()
    start = time.monotonic()
    interval = 1.0 / client.rate
    sent = 0
    while True:
        due = start + sent * interval
        now = time.monotonic()
        if due - start >= client.duration:
            break
        if due > now:
            time.sleep(due - now)
        sent += 1
        model = rng.choices(client.models, client.weights)[0]
        server = turn % len(handles)
        handle = handles[server]
        turn += 1
        tensor = module.InferInput("INPUT0", [1, WIDTH], "FP32")
        tensor.set_data_from_numpy(x)
        t0 = time.time()
        error = ""
        try:
            if client.protocol == "http":
                result = handle.infer(model, [tensor])
            else:
                result = handle.infer(model, [tensor], client_timeout=120)
            got = result.as_numpy("OUTPUT0")
            if got is None or not np.allclose(got, client.kinds[model].expected(x), atol=1e-5):
                error = f"wrong answer from {model}: {got!r}"
        except Exception as exc:  # every failure is counted and its message kept
            error = f"{type(exc).__name__}: {exc}"[:300]
        records.append((model, t0, time.time(), error, server))
    for handle in handles:
        handle.close()
    return records


def drive(clients: list[Client]) -> list[Record]:
    """Run every client at once (one process each) and return all their records."""
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(len(clients)) as pool:
        barrier = manager.Barrier(len(clients))
        results = pool.map(_run, [(client, barrier) for client in clients])
    return [record for records in results for record in records]
