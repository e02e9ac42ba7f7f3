"""The engine's CPU per request on its own: its request path driven in one process, without sockets.

``run.py`` (1) reads the engine's CPU time under real load, which on a shared 2-core machine mixes
the request path with wake-ups, context switches and tick-based CPU accounting.  This drives the
same code with none of that: ``Infer`` frames, encoded as a worker encodes them (inputs in a real
request arena; checked against the published catalog, so the engine does not check them again),
are handed to the engine's channel (:class:`naiad.ipc.channel.Channel`) in batches of ``--batch``
per read; the answers are encoded and written to a transport that drops them.  Per
request it measures the process's CPU time (``time.process_time``) of:

- **engine path**: channel decode, :class:`naiad.engine.link.WorkerLink`, the data plane, the
  scheduler, the model, the answer's encoding;
- **data plane alone**: ``DataPlane.infer`` awaited one request at a time on the same models (the
  reference: what the single-process server spends in the engine's part of a request).

Their difference is what crossing processes costs the engine.  Python models run in the engine
(``NAIAD_INSTANCE_PROCESSES=false``), as in ``run.py``.  Medians of ``--rounds``.

usage: python benchmarks/scaling/engine_path.py [--requests 20000] [--batch 1,8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from naiad.backends.runtime import Runtime
from naiad.core.request import InferRequest, Tensor
from naiad.dataplane import DataPlane
from naiad.engine.link import PublishedSignatures, WorkerLink
from naiad.ipc import arena, tensors
from naiad.ipc.arena import Arena
from naiad.ipc.channel import Channel
from naiad.ipc.messages import Infer, ToEngine
from naiad.repository.manager import ModelRepository
from naiad.repository.registry import ModelRegistry

from benchmarks.scaling.run import repository, uptime

ARENA_SIZE = 32 * 1024 * 1024


class _Dropped:
    """The engine's transport: answers are encoded and written, to nowhere."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    def close(self) -> None:
        pass


def _requests() -> dict[str, InferRequest]:
    small = np.array([1, 2, 3, 4], dtype=np.float32)
    image = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    return {
        "add_sub": InferRequest(
            "add_sub", inputs=[Tensor("INPUT0", "FP32", small), Tensor("INPUT1", "FP32", small)]
        ),
        "identity 1x3x224x224 FP32": InferRequest("identity_large", inputs=[Tensor("INPUT0", "FP32", image)]),
    }


async def _calls(method: str, args: list[msgspec.Raw]) -> Any:
    raise NotImplementedError(method)  # no control calls in this benchmark


async def _measure(
    dataplane: DataPlane, request: InferRequest, count: int, batch: int
) -> tuple[float, float, float]:
    """(engine path, data plane alone) in us of CPU per request, and the event loop's share of the
    engine path's CPU (the rest ran on the model instance's thread: the scheduler's choice)."""
    request_fd = arena.create("bench-requests", ARENA_SIZE)
    response_fd = arena.create("bench-responses", ARENA_SIZE)
    worker_side = Arena(request_fd, ARENA_SIZE, writable=True)
    published = PublishedSignatures()
    published.update(1, dataplane.registry.models())
    link = WorkerLink(
        0,
        dataplane,
        Arena(request_fd, ARENA_SIZE, writable=True),  # (as the engine maps it)
        Arena(response_fd, ARENA_SIZE, writable=True),
        _calls,
        lambda _: None,
        published,
    )
    channel: Channel[ToEngine] = Channel(ToEngine, link.on_message, link.on_lost)
    channel.connection_made(_Dropped())  # type: ignore[arg-type]
    link.bind(channel)
    message = tensors.request_message(request, worker_side, [])  # one input block, read by every request
    message.validated = 1  # checked against the published catalog, as a worker checks it
    encoder = msgspec.msgpack.Encoder()

    def frame(request_id: int) -> bytes:
        body = encoder.encode(Infer(request_id, message))
        return struct.pack("<I", len(body)) + body

    reads = [b"".join(frame(i * batch + j) for j in range(batch)) for i in range(count // batch)]
    for _ in range(300):  # short executions: the scheduler runs the model inline from here on
        await dataplane.infer(_copy(request))
    for data in reads[:100]:
        channel.data_received(data)
        await asyncio.sleep(0)
    started, on_loop = time.process_time(), time.thread_time()
    for data in reads:
        channel.data_received(data)
        await asyncio.sleep(0)  # a turn of the loop: answers that waited (a thread) go out
    while link.inflight:
        await asyncio.sleep(0)
    spent = time.process_time() - started
    engine = spent / (len(reads) * batch) * 1e6
    share = (time.thread_time() - on_loop) / spent
    started = time.process_time()
    for _ in range(count):
        await dataplane.infer(_copy(request))
    alone = (time.process_time() - started) / count * 1e6
    return engine, alone, share


def _copy(request: InferRequest) -> InferRequest:
    return InferRequest(request.model_name, inputs=list(request.inputs))


async def _main(args: argparse.Namespace) -> None:
    registry = ModelRegistry()
    models = ModelRepository([repository(in_engine=True)], registry=registry, runtime=Runtime())
    dataplane = DataPlane(registry, models)
    await models.start()
    dataplane.started = True
    try:
        print("| workload | frames per read | engine path | data plane alone | difference | on the loop |")
        print("|---|---|---|---|---|---|")
        for label, request in _requests().items():
            for batch in (int(b) for b in args.batch.split(",")):
                rows = [await _measure(dataplane, request, args.requests, batch) for _ in range(args.rounds)]
                engine = statistics.median(row[0] for row in rows)
                alone = statistics.median(row[1] for row in rows)
                share = statistics.median(row[2] for row in rows)
                print(
                    f"| {label} | {batch} | {engine:.1f} us | {alone:.1f} us | {engine - alone:.1f} us "
                    f"| {share:.0%} |",
                    flush=True,
                )
    finally:
        await models.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--rounds", type=int, default=3)
    return run_between_uptimes(_main(parser.parse_args(argv)))


def run_between_uptimes(main: Coroutine[Any, Any, None]) -> int:
    """Run ``main`` on uvloop between two ``uptime`` lines: how loaded the machine was meanwhile."""
    print(f"uptime: {uptime()}", flush=True)
    import uvloop

    uvloop.run(main)
    print(f"uptime after: {uptime()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
