"""One frontend worker alone on a core, against Triton on one core: what (4) of issue 15 rests on.

On a large node each frontend worker has a core of its own and the engine another; (4) asks for a
server above "Triton's one-core figure times N".  This measures both sides of that on this 2-core
machine: ``naiad serve --frontend-workers 1`` with the engine and the load generator pinned to core 0
and the worker's process to core 1 (so the worker's core does nothing else), and Triton 2.51 pinned to
core 1 with the load on core 0, as ``run.py`` (3) pins it.  For each, HTTP/JSON (wrk) and gRPC
(h2load) ``add_sub`` at 16 connections: requests per second, CPU per request of the process on core 1
(the worker's, or Triton's), and how busy that core was.  Python models run in the engine, so the
worker's core carries only the worker.  Each server also runs under the other Linux scheduling policy
(:data:`VARIANTS`): Naiad with ``--cpu-policy normal``, Triton under ``chrt -b``.  Medians of
``--rounds``.

usage: python benchmarks/scaling/worker_core.py [--rounds 2] [--duration 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.common.scratch import scratch
from benchmarks.scaling.run import Run, add_sub_workload, children, cpu_seconds, median, repository, serve

#: gRPC calls per measurement (h2load takes a count, not a duration): ~3-4 s at one worker core's rate.
GRPC_CALLS = 20_000


def _pin(pid: int, core: str) -> None:
    subprocess.run(["taskset", "-a", "-pc", core, str(pid)], capture_output=True, check=True)


def pin_apart(engine: int) -> list[int]:
    """Every thread of the engine ``engine`` onto core 0, of its frontend workers onto core 1: the
    workers' pids."""
    _pin(engine, "0")
    workers = [p for p in children(engine) if b"naiad.workers" in Path(f"/proc/{p}/cmdline").read_bytes()]
    for worker in workers:
        _pin(worker, "1")
    return workers


#: The servers measured, alternated round by round: (row label, server, its command's prefix, its
#: flags).  Naiad runs its threads under SCHED_BATCH by default (``--cpu-policy``, see
#: naiad.core.cpu_policy); the rows under ``SCHED_OTHER`` show what that is worth, and Triton started
#: under SCHED_BATCH (``chrt -b``; its threads inherit it) whether Triton gains as much from it.
VARIANTS: list[tuple[str, str, list[str], list[str]]] = [
    ("Naiad, one frontend worker", "naiad", [], []),
    ("Naiad, one frontend worker, `--cpu-policy normal`", "naiad", [], ["--cpu-policy=normal"]),
    ("Triton 2.51", "triton", [], []),
    ("Triton 2.51 under SCHED_BATCH (`chrt -b 0`)", "triton", ["chrt", "-b", "0"], []),
]


def _measure(
    name: str, repo: Path, work: Path, duration: int, prefix: list[str], flags: list[str]
) -> dict[str, tuple[float, float, float]]:
    """``{protocol: (requests/s, CPU-us per request on core 1, that core's busy share)}``."""
    served = serve(name, repo, None if name == "naiad" else "1", workers=1)
    served.command = prefix + served.command + flags
    with served:
        assert served.process is not None
        pid = served.process.pid
        watched = [pid]
        if name == "naiad":
            watched = pin_apart(pid)
        run = Run(served, work, "0")
        time.sleep(2)
        run.http(2)  # warm-up
        results: dict[str, tuple[float, float, float]] = {}
        before, start = sum(cpu_seconds(p) for p in watched), time.monotonic()
        rps = run.http(duration)
        used, elapsed = sum(cpu_seconds(p) for p in watched) - before, time.monotonic() - start
        results["HTTP/JSON"] = (rps, used / (rps * elapsed) * 1e6, used / elapsed)
        run.grpc(add_sub_workload(2_000))  # warm-up
        before, start = sum(cpu_seconds(p) for p in watched), time.monotonic()
        rps, calls = run.grpc(add_sub_workload(GRPC_CALLS))
        used, elapsed = sum(cpu_seconds(p) for p in watched) - before, time.monotonic() - start
        results["gRPC"] = (rps, used / calls * 1e6, used / elapsed)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=int, default=5, help="seconds of HTTP load per measurement")
    args = parser.parse_args(argv)
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"uptime: {uptime}")
    repo = repository(in_engine=True)
    work = scratch("bench-worker-core-")
    rows: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for _ in range(args.rounds):  # the two servers alternate, round by round
        for label, name, prefix, flags in VARIANTS:
            for protocol, figures in _measure(name, repo, work, args.duration, prefix, flags).items():
                rows.setdefault((label, protocol), []).append(figures)
    print("| server on core 1 | protocol | req/s | CPU per request | core 1 busy | req/s vs Triton |")
    print("|---|---|---:|---:|---:|---:|")
    for protocol in ("HTTP/JSON", "gRPC"):
        triton_rps = median([r[0] for r in rows[("Triton 2.51", protocol)]])
        for label, *_ in VARIANTS:
            figures = rows[(label, protocol)]
            rps = median([r[0] for r in figures])
            print(
                f"| {label} | {protocol} | {rps:,.0f} | {median([r[1] for r in figures]):.1f} us "
                f"| {median([r[2] for r in figures]):.2f} | {rps / triton_rps:.2f}x |"
            )
    print(f"uptime after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
