"""Issue 15 (4): throughput with 1, 2, 4, 8, 14 frontend cores, against Triton's one core times N.

On a machine with C usable cores: the engine on the first core (every thread of it), one frontend
worker per core on the next N cores (``naiad serve --frontend-workers N``, each worker's threads
pinned to its core), and the load generators on the cores left (wrk for HTTP/JSON, h2load for gRPC,
one thread per load core, 16 connections per worker core); with no core left, the load shares the
engine's, as on this project's 2-core machine.  ``add_sub`` with its Python model in the engine, as
(3) measures a core (``--model-processes``: in a model process, Naiad's default for Python models,
which lowers the engine's bound).  For each N: requests per second, per worker core, against N x
the one-core figure (near-linear: >= 0.8) and against Triton's one-core figure x N (Triton's own
scaling taken as linear, a bound in its favour), and the engine's CPU per request (its bound: 1e6 /
that).

Triton's one-core figure is measured in the same run (Triton 2.51 from ``shared/reference/triton.sh``,
pinned to one core, the load on the others) where that script exists; elsewhere give the figures with
``--triton-one-core HTTP,GRPC`` (on a lent machine ``device_triton.sh`` measures them, in a call of
their own: Triton's wheel and Naiad's do not fit in one), or leave them out (the table then shows
Naiad's own scaling).  Each N once, in order; ``--rounds`` repeats the whole sweep (medians).

usage: python benchmarks/scaling/cores.py [--cores 1,2,4,8,14] [--duration 5] [--calls 40000]
       [--rounds 1] [--model-processes] [--triton-one-core HTTP,GRPC] [--python PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.references import ROOT, SHARED, naiad, triton
from benchmarks.common.scratch import scratch
from benchmarks.common.wrk import ADD_SUB_SCRIPT
from benchmarks.grpc_infer.run import grpc_body, h2load_command
from benchmarks.scaling.run import add_sub_workload, children, cpu_seconds, repository, uptime

CONNECTIONS_PER_CORE = 16


@dataclass
class Layout:
    """Which cores the engine, the workers (one each) and the load generators run on."""

    engine: int
    workers: list[int]
    load: list[int]

    @staticmethod
    def of(cores: list[int], n: int) -> Layout:
        if n + 1 > len(cores):
            raise ValueError(f"{n} worker cores and the engine's need {n + 1} cores; {len(cores)} usable")
        rest = cores[n + 1 :]
        return Layout(cores[0], cores[1 : n + 1], rest or [cores[0]])

    def cpus(self, which: list[int]) -> str:
        return ",".join(str(core) for core in which)


def _pin(pid: int, cpus: str) -> None:
    subprocess.run(["taskset", "-a", "-pc", cpus, str(pid)], capture_output=True, check=True)


def _children(pid: int) -> list[int]:
    """``pid``'s child processes: from ``/proc/<pid>/task/<pid>/children``, or where a kernel has no
    such file (gVisor, as on the lent machines), from every process's parent in ``/proc/*/stat``."""
    if Path(f"/proc/{pid}/task/{pid}/children").exists():
        return children(pid)
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _workers(engine: int, count: int) -> list[int]:
    """The frontend workers' pids, once all ``count`` have started."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = [p for p in _children(engine) if b"naiad.workers" in Path(f"/proc/{p}/cmdline").read_bytes()]
        if len(found) >= count:
            return found
        time.sleep(0.2)
    raise RuntimeError(f"{count} frontend workers did not start")


def http_load(url: str, layout: Layout, connections: int, duration: int) -> float:
    command = [
        "taskset",
        "-c",
        layout.cpus(layout.load),
        "wrk",
        f"-t{len(layout.load)}",
        f"-c{max(connections, len(layout.load))}",
        f"-d{duration}s",
        "-s",
        str(ADD_SUB_SCRIPT),
        url,
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out:
        raise RuntimeError(f"failed HTTP requests:\n{out}")
    return float(next(line.split()[1] for line in out.splitlines() if line.startswith("Requests/sec:")))


def grpc_load(port: int, body: Path, layout: Layout, connections: int, calls: int) -> float:
    url = f"http://127.0.0.1:{port}/inference.GRPCInferenceService/ModelInfer"
    command = h2load_command(url, body, calls, connections)
    command[1:1] = ["-t", str(min(len(layout.load), connections))]
    out = subprocess.run(
        ["taskset", "-c", layout.cpus(layout.load), *command], capture_output=True, text=True, check=True
    ).stdout
    if f"{calls} succeeded" not in out:
        raise RuntimeError(f"failed gRPC calls:\n{out}")
    return float(next(line.split()[3] for line in out.splitlines() if line.startswith("finished in")))


@dataclass
class Figures:
    http: float
    grpc: float
    engine_us: float  # the engine's CPU per request over both measurements


def measure_naiad(repo: Path, layout: Layout, body: Path, duration: int, calls: int, python: str) -> Figures:
    n = len(layout.workers)
    served = naiad(repo, f"--frontend-workers={n}")
    served.command = [python, "-m", "naiad", *served.command[1:]]
    with served:
        assert served.process is not None
        engine = served.process.pid
        _pin(engine, str(layout.engine))
        for pid, core in zip(_workers(engine, n), layout.workers, strict=True):
            _pin(pid, str(core))
        connections = CONNECTIONS_PER_CORE * n
        url = f"{served.http_url}/v2/models/add_sub/infer"
        http_load(url, layout, connections, 2)  # warm-up
        grpc_load(served.grpc_port, body, layout, connections, 2_000 * n)
        before = cpu_seconds(engine)
        http = http_load(url, layout, connections, duration)
        grpc_calls = calls * n
        started = time.monotonic()
        grpc = grpc_load(served.grpc_port, body, layout, connections, grpc_calls)
        grpc_seconds = time.monotonic() - started
        used = cpu_seconds(engine) - before
        served_requests = http * duration + grpc * grpc_seconds
        return Figures(http, grpc, used / served_requests * 1e6)


def measure_triton(repo: Path, layout: Layout, body: Path, duration: int, calls: int) -> Figures:
    """Triton 2.51 (``shared/reference/triton.sh``) pinned to the first worker core, the load where
    the workers' would be."""
    served = triton(repo)
    served.command = ["taskset", "-c", str(layout.workers[0]), *served.command]
    with served:
        url = f"{served.http_url}/v2/models/add_sub/infer"
        http_load(url, layout, CONNECTIONS_PER_CORE, 2)  # warm-up
        http = http_load(url, layout, CONNECTIONS_PER_CORE, duration)
        grpc_load(served.grpc_port, body, layout, CONNECTIONS_PER_CORE, 2_000)
        grpc = grpc_load(served.grpc_port, body, layout, CONNECTIONS_PER_CORE, calls)
        return Figures(http, grpc, float("nan"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cores", default="1,2,4,8,14", help="worker core counts (those that fit are run)")
    parser.add_argument("--duration", type=int, default=5, help="seconds of HTTP load per measurement")
    parser.add_argument(
        "--calls", type=int, default=40_000, help="gRPC calls per worker core per measurement"
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--model-processes",
        action="store_true",
        help="add_sub in a model process (Naiad's default for Python)",
    )
    parser.add_argument(
        "--python", default=str(ROOT / ".venv" / "bin" / "python"), help="the Python that serves"
    )
    parser.add_argument(
        "--triton-one-core",
        help="Triton's one-core HTTP,gRPC figures, where Triton cannot run (no triton.sh)",
    )
    args = parser.parse_args(argv)
    cores = sorted(os.sched_getaffinity(0))
    counts = [n for n in (int(c) for c in args.cores.split(",")) if n + 1 <= len(cores)]
    work = scratch("bench-cores-")
    body = grpc_body(add_sub_workload(1), work / "add_sub.bin")
    repo = repository(not args.model_processes)
    print(f"uptime: {uptime()}", flush=True)
    print(f"{len(cores)} usable cores; worker cores measured: {counts}", flush=True)
    runs: dict[int, list[Figures]] = {n: [] for n in counts}
    triton_runs: list[Figures] = []
    for _ in range(args.rounds):
        if (SHARED / "triton.sh").exists() and not args.triton_one_core:
            layout = Layout.of(cores, 1)
            triton_runs.append(measure_triton(repo, layout, body, args.duration, args.calls))
            print(
                f"  Triton, one core: HTTP {triton_runs[-1].http:,.0f}, gRPC {triton_runs[-1].grpc:,.0f}",
                flush=True,
            )
        for n in counts:
            runs[n].append(
                measure_naiad(repo, Layout.of(cores, n), body, args.duration, args.calls, args.python)
            )
            figures = runs[n][-1]
            print(f"  N={n}: HTTP {figures.http:,.0f}, gRPC {figures.grpc:,.0f}", flush=True)
    triton: tuple[float, float] | None = None
    if triton_runs:
        triton = (
            statistics.median(f.http for f in triton_runs),
            statistics.median(f.grpc for f in triton_runs),
        )
    elif args.triton_one_core:
        http_text, grpc_text = args.triton_one_core.split(",")
        triton = (float(http_text), float(grpc_text))
    one = {
        key: statistics.median(getattr(f, key) for f in runs[counts[0]]) / counts[0]
        for key in ("http", "grpc")
    }
    print()
    if triton is not None:
        print(f"Triton, one core: HTTP {triton[0]:,.0f} req/s, gRPC {triton[1]:,.0f}")
    print(
        "| worker cores | HTTP req/s | per core | vs 0.8 x N x one core | vs Triton x N "
        "| gRPC calls/s | per core | vs 0.8 x N x one core | vs Triton x N | engine CPU per request |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in counts:
        cells = [str(n)]
        for index, key in enumerate(("http", "grpc")):
            rate = statistics.median(getattr(f, key) for f in runs[n])
            linear = rate / (0.8 * n * one[key])
            versus = f"{rate / (triton[index] * n):.2f}x" if triton is not None else "-"
            cells += [f"{rate:,.0f}", f"{rate / n:,.0f}", f"{linear:.2f}x", versus]
        cells.append(f"{statistics.median(f.engine_us for f in runs[n]):.1f} us")
        print("| " + " | ".join(cells) + " |")
    print(f"uptime after: {uptime()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
