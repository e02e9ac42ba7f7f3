"""The engine <-> model process hop alone: CPU time per request, without HTTP.

Loads the reference ``add_sub`` as the server does (config, auto-complete, backend from a runtime),
once in a model process and once inside the engine, and drives each from an event loop as the
scheduler does (``start_on_loop`` for the model process, ``execute`` on the loop for the engine):
one request at a time (concurrency 1) and 16 in flight.  It measures the CPU time both processes
spent (the engine's from ``getrusage``, the model process's from ``/proc/<pid>/task/*/schedstat``, in
ns) per request: CPU time, unlike wall time, hardly moves with the load other work puts on a shared
machine (``uptime`` is printed before and after).  The hop's cost is the difference between the two.

usage: python benchmarks/isolation/hop.py [--requests 20000] [--rounds 3] [--profile FILE]

``--profile FILE`` also writes a cProfile (CPU time) of the engine side for one extra round at 16 in
flight.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
from naiad.backends.base import ExecuteResult, InstanceContext
from naiad.backends.runtime import Runtime
from naiad.core.request import InferRequest, Tensor
from naiad.repository.config import normalize, parse_text, resolve_backend, signature_of
from naiad.repository.layout import CONFIG_FILE, available_versions

from benchmarks.common.references import SHARED

IN_THE_ENGINE = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }\n'


def context(runtime: Runtime, model_dir: Path, in_engine: bool) -> InstanceContext:
    """The instance context the repository would make for ``model_dir``'s version 1."""
    text = (model_dir / CONFIG_FILE).read_text() + (IN_THE_ENGINE if in_engine else "")
    config = parse_text(text, str(model_dir / CONFIG_FILE))
    versions = available_versions(model_dir)
    resolve_backend(config, model_dir, versions)
    runtime.backend("python").auto_complete(config, model_dir, model_dir / str(versions[-1]))
    normalize(config, model_dir.name)
    return InstanceContext(
        model_name=config.name,
        model_version=1,
        model_dir=model_dir,
        version_dir=model_dir / "1",
        model_file=model_dir / "1" / config.default_model_filename,
        config=config,
        signature=signature_of(config),
        instance_name=f"{config.name}_0",
        kind="CPU",
        device_id=0,
    )


def request() -> InferRequest:
    inputs = [Tensor(name, "FP32", np.arange(4, dtype=np.float32)) for name in ("INPUT0", "INPUT1")]
    return InferRequest("add_sub", "", "", inputs)


Run = Callable[[Sequence[InferRequest], Callable[[list[ExecuteResult]], None]], None]


async def drive(run: Run, count: int, concurrency: int) -> None:
    """``count`` single-request executions through ``run``, ``concurrency`` in flight."""
    loop = asyncio.get_running_loop()
    finished = loop.create_future()
    started = completed = 0

    def launch() -> None:
        nonlocal started
        started += 1
        loop.call_soon(run, [request()], done)

    def done(results: list[ExecuteResult]) -> None:
        nonlocal completed
        completed += 1
        assert not isinstance(results[0], Exception), results[0]
        if started < count:
            launch()
        elif completed == count:
            finished.set_result(None)

    for _ in range(min(concurrency, count)):
        launch()
    await finished


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int | None) -> float:
    """CPU seconds of every thread of ``pid`` (ns resolution), 0 without one."""
    if pid is None:
        return 0.0
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
            total += int(stat.read().split()[0])
    return total / 1e9


async def measure(run: Run, pid: int | None, count: int, concurrency: int) -> tuple[float, float, float]:
    """(engine CPU-us, model process CPU-us, wall us) per request."""
    engine, child, wall = _own_cpu(), _process_cpu(pid), time.perf_counter()
    await drive(run, count, concurrency)
    wall = time.perf_counter() - wall
    engine, child = _own_cpu() - engine, _process_cpu(pid) - child
    return engine / count * 1e6, child / count * 1e6, wall / count * 1e6


def uvloop_run(coroutine: Any) -> None:
    """On uvloop, as the server runs (the instance keeps to the loop it first ran on)."""
    try:
        import uvloop

        uvloop.run(coroutine)
    except ImportError:
        asyncio.run(coroutine)


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", type=Path)
    uvloop_run(run_all(parser.parse_args()))


async def run_all(args: argparse.Namespace) -> None:
    print(f"load before: {_uptime()}")
    runtime = Runtime()
    model_dir = SHARED / "models" / "add_sub"
    backend = runtime.backend("python")
    process = backend.create_instance(context(runtime, model_dir, in_engine=False))
    engine = backend.create_instance(context(runtime, model_dir, in_engine=True))

    def on_engine(requests: Sequence[InferRequest], done: Callable[[list[ExecuteResult]], None]) -> None:
        done(engine.execute(requests))

    pid = process._child.process.pid
    runs: dict[str, tuple[Run, int | None]] = {
        "model process": (process.start_on_loop, pid),
        "in the engine": (on_engine, None),
    }
    try:
        for run, child in runs.values():  # warm-up
            await measure(run, child, 2000, 16)
        results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
        for _ in range(args.rounds):
            for concurrency in (1, 16):
                for name, (run, child) in runs.items():
                    results.setdefault((name, concurrency), []).append(
                        await measure(run, child, args.requests, concurrency)
                    )
        if args.profile is not None:
            profiler = cProfile.Profile(time.thread_time)
            profiler.enable()
            await measure(process.start_on_loop, pid, args.requests, 16)
            profiler.disable()
            profiler.dump_stats(args.profile)
    finally:
        process.close()
        engine.close()
    print(f"add_sub executions, {args.requests} per round, medians of {args.rounds} rounds:")
    for concurrency in (1, 16):
        medians = {
            name: [statistics.median(row[i] for row in results[(name, concurrency)]) for i in range(3)]
            for name in runs
        }
        base = sum(medians["in the engine"][:2])
        for name, (engine_us, child_us, wall_us) in medians.items():
            total = engine_us + child_us
            print(
                f"  c={concurrency:<2} {name:<14} engine {engine_us:6.1f} + model process {child_us:6.1f} "
                f"= {total:6.1f} CPU-us (hop {total - base:+6.1f}), wall {wall_us:6.1f} us"
            )
    print(f"load after: {_uptime()}")


if __name__ == "__main__":
    main()
