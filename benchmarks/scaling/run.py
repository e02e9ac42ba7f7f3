"""Frontend workers: what one engine costs per request, and throughput by frontend processes.

Three measurements, Naiad and real Triton 2.51 side by side in one run (``add_sub``, the reference
Python model, and ``identity_large``, a Python identity of one FP32[1,3,224,224] tensor):

1. **Engine CPU per request**: Naiad with frontend workers under load; the engine's own CPU time
   (``/proc/<pid>/stat`` utime + stime) over the requests answered meanwhile.  Model processes and
   workers are other processes and are not counted; their CPU is reported beside it.
2. **Throughput by N** (``--frontend-workers`` 0, 1, 2 on this machine), HTTP/JSON with wrk and gRPC with
   h2load, Triton measured in the same rounds.
3. **Per core**: every server process pinned to one core (``taskset -c 1``), the load generator on
   another (``taskset -c 0``), as issue 15's table.

(2) and (3) also print the requests each server's process tree answers per CPU-second (user + system
time from ``/proc``), the per-core figure that holds up best when other work shares the pinned core.

Each (2)/(3) measurement follows ``--warmup`` seconds of the same load, not counted (a server just
started is not in its steady state).  Medians of ``--rounds`` interleaved rounds.  The machine these
figures come from is shared: the script prints ``uptime`` before and after.

Naiad's Python models run in the engine here (``NAIAD_INSTANCE_PROCESSES=false``), as when issue 15
measured them, so the figures show the frontends and the engine, not the model-process hop;
``--model-processes`` measures Naiad's default instead.

usage: python benchmarks/scaling/run.py [--rounds 3] [--duration 5] [--warmup 3] [--workers 0,1,2]
                                        [--skip 1,2,3] [--model-processes]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.references import SHARED, Served, naiad, triton
from benchmarks.common.scratch import scratch
from benchmarks.common.wrk import ADD_SUB_SCRIPT, wrk
from benchmarks.grpc_infer.run import (
    IDENTITY_CONFIG,
    IDENTITY_PY,
    LARGE_SHAPE,
    Workload,
    check_answers,
    grpc_body,
    h2load,
    h2load_command,
)
from benchmarks.isolation.run import cpu_seconds as tree_cpu_seconds

CONNECTIONS = 16


#: Naiad runs Python models in model processes by default; this parameter (which Triton ignores) keeps
#: them in the engine, as the single-process figures of issue 15 were measured.
IN_ENGINE = '\nparameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }\n'


def repository(in_engine: bool) -> Path:
    root = scratch("bench-scaling-")
    shutil.copytree(SHARED / "models" / "add_sub", root / "add_sub")
    if in_engine:
        with (root / "add_sub" / "config.pbtxt").open("a") as config:
            config.write(IN_ENGINE)
    (root / "identity_large" / "1").mkdir(parents=True)
    (root / "identity_large" / "config.pbtxt").write_text(textwrap.dedent(IDENTITY_CONFIG))
    (root / "identity_large" / "1" / "model.py").write_text(textwrap.dedent(IDENTITY_PY))
    if in_engine:
        with (root / "identity_large" / "config.pbtxt").open("a") as config:
            config.write(IN_ENGINE)
    return root


def add_sub_workload(requests: int) -> Workload:
    a, b = np.array([1, 2, 3, 4], dtype=np.float32), np.ones(4, dtype=np.float32)
    return Workload(
        "add_sub", "add_sub", {"INPUT0": a, "INPUT1": b}, {"OUTPUT0": a + b, "OUTPUT1": a - b}, requests
    )


def identity_workload(requests: int) -> Workload:
    image = np.random.default_rng(0).random(LARGE_SHAPE, dtype=np.float32)
    return Workload("identity_large", "identity_large", {"INPUT0": image}, {"OUTPUT0": image}, requests)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def taskset(core: str | None, command: list[str]) -> list[str]:
    return ["taskset", "-c", core, *command] if core is not None else command


class Run:
    """One server under test: starts it (pinned or not) and drives load at it."""

    def __init__(self, served: Served, work: Path, load_core: str | None) -> None:
        self.served = served
        self.work = work
        self.load_core = load_core

    def http(self, duration: int) -> float:
        url = f"{self.served.http_url}/v2/models/add_sub/infer"
        if self.load_core is None:
            return wrk(url, ADD_SUB_SCRIPT, duration, CONNECTIONS)["rps"]
        out = subprocess.run(
            taskset(
                self.load_core,
                ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{duration}s", "-s", str(ADD_SUB_SCRIPT), url],
            ),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        if "Non-2xx" in out:
            raise RuntimeError(f"failed responses:\n{out}")
        return float(out.split("Requests/sec:")[1].split()[0])

    def grpc(self, workload: Workload) -> tuple[float, int]:
        body = grpc_body(workload, self.work / f"{workload.name}.bin")
        check_answers(self.served, workload, 5)  # type: ignore[arg-type]
        log = self.work / "h2load.log"
        if self.load_core is None:
            m = h2load(self.served, workload, body, workload.requests, CONNECTIONS, log)  # type: ignore[arg-type]
            return m.rps, workload.requests
        return h2load_calls(self.served.grpc_port, body, workload.requests, self.load_core), workload.requests


def h2load_calls(port: int, body: Path, calls: int, core: str | None) -> float:
    """Calls per second of ``calls`` unary ``ModelInfer`` calls (16 connections) from h2load on ``core``."""
    url = f"http://127.0.0.1:{port}/inference.GRPCInferenceService/ModelInfer"
    out = subprocess.run(
        taskset(core, h2load_command(url, body, calls, CONNECTIONS)),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if f"{calls} succeeded" not in out:
        raise RuntimeError(f"failed calls:\n{out}")
    return next(float(line.split()[3]) for line in out.splitlines() if line.startswith("finished in"))


def serve(name: str, repo: Path, core: str | None, workers: int = 0) -> Served:
    if name == "triton":
        served = triton(repo)
    else:
        served = naiad(repo, f"--frontend-workers={workers}")
    served.command = taskset(core, served.command)
    return served


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def engine_cost(repo: Path, work: Path, duration: int, rounds: int) -> dict[str, dict[str, float]]:
    """(1): the engine's CPU per request, with 2 frontend workers, HTTP add_sub and gRPC identity."""
    results: dict[str, dict[str, list[float]]] = {}
    with serve("naiad", repo, None, workers=2) as served:
        assert served.process is not None
        engine = served.process.pid
        run = Run(served, work, None)
        time.sleep(2)
        for _ in range(rounds):
            for label, drive in (
                ("add_sub (HTTP/JSON)", lambda: (run.http(duration) * duration, 0)),
                ("add_sub (gRPC)", lambda: _grpc_count(run, add_sub_workload(15000))),
                ("identity 1x3x224x224 FP32 (gRPC)", lambda: _grpc_count(run, identity_workload(3000))),
            ):
                workers = [
                    pid
                    for pid in children(engine)
                    if b"naiad.workers" in Path(f"/proc/{pid}/cmdline").read_bytes()
                ]
                before = cpu_seconds(engine), sum(cpu_seconds(p) for p in workers)
                count, _ = drive()
                after = cpu_seconds(engine), sum(cpu_seconds(p) for p in workers)
                row = results.setdefault(label, {"engine_us": [], "workers_us": []})
                row["engine_us"].append((after[0] - before[0]) / count * 1e6)
                row["workers_us"].append((after[1] - before[1]) / count * 1e6)
    return {label: {k: median(v) for k, v in row.items()} for label, row in results.items()}


def _grpc_count(run: Run, workload: Workload) -> tuple[float, int]:
    _, count = run.grpc(workload)
    return float(count), 0


def throughput(
    repo: Path,
    work: Path,
    duration: int,
    rounds: int,
    configs: list[tuple[str, int]],
    core: str | None,
    load_core: str | None,
    warmup: int = 0,
) -> dict[str, dict[str, float]]:
    """(2)/(3): median req/s of each server configuration, HTTP add_sub and gRPC add_sub, and the
    requests its whole process tree answers per CPU-second (user + system from ``/proc``): on a core
    that also runs other work, req/s falls with what the others take, CPU per request much less.

    ``warmup``: seconds of the same load before each measurement, not counted. A server just started
    is not yet in its steady state (measured: Naiad's first 5 s of HTTP load after start-up ran 20-30%
    below the next 5 s; Triton's ran 15% above them), so measuring from the first request measures
    start-up, in a direction that differs between servers."""
    results: dict[str, dict[str, list[float]]] = {}
    for _ in range(rounds):
        for name, workers in configs:
            label = "Triton 2.51" if name == "triton" else f"Naiad, --frontend-workers {workers}"
            with serve(name, repo, core, workers) as served:
                assert served.process is not None
                pid = served.process.pid
                time.sleep(1.0 + workers)
                run = Run(served, work, load_core)
                row = results.setdefault(label, {"http": [], "grpc": [], "http_cpu": [], "grpc_cpu": []})
                if warmup:
                    run.http(warmup)
                spent = tree_cpu_seconds(pid)
                rate = run.http(duration)
                row["http"].append(rate)
                row["http_cpu"].append(rate * duration / (tree_cpu_seconds(pid) - spent))
                if warmup:
                    run.grpc(add_sub_workload(int(2000 * warmup)))
                spent = tree_cpu_seconds(pid)
                rate, calls = run.grpc(add_sub_workload(int(6000 * duration)))
                row["grpc"].append(rate)
                row["grpc_cpu"].append(calls / (tree_cpu_seconds(pid) - spent))
    return {label: {k: median(v) for k, v in row.items()} for label, row in results.items()}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--workers", default="0,1,2")
    parser.add_argument("--skip", default="")
    parser.add_argument("--warmup", type=int, default=3, help="seconds of load before each measurement")
    parser.add_argument(
        "--model-processes", action="store_true", help="Naiad's default: Python models in model processes"
    )
    args = parser.parse_args(argv)
    skip = set(args.skip.split(",")) if args.skip else set()
    repo = repository(in_engine=not args.model_processes)
    work = scratch("bench-scaling-work-")
    where = "model processes" if args.model_processes else "the engine (NAIAD_INSTANCE_PROCESSES=false)"
    print(f"cores: {os.cpu_count()}  Naiad's Python models in {where}  uptime: {uptime()}", flush=True)
    report: Callable[[str], None] = lambda line: print(line, flush=True)  # noqa: E731
    if "1" not in skip:
        report("\n(1) engine CPU per request (2 frontend workers, engine unpinned)")
        report("| workload | engine us/request | workers us/request | one engine's bound (req/s) |")
        report("|---|---|---|---|")
        for label, row in engine_cost(repo, work, args.duration, args.rounds).items():
            bound = 1e6 / row["engine_us"]
            report(f"| {label} | {row['engine_us']:.0f} | {row['workers_us']:.0f} | {bound:,.0f} |")
    if "2" not in skip:
        configs = [("naiad", int(n)) for n in args.workers.split(",")] + [("triton", 0)]
        report(f"\n(2) throughput by frontend workers, unpinned, {CONNECTIONS} connections (req/s)")
        _table(report, throughput(repo, work, args.duration, args.rounds, configs, None, None, args.warmup))
    if "3" not in skip:
        configs = [("naiad", 0), ("naiad", 1), ("triton", 0)]
        report(f"\n(3) per core: servers pinned to core 1, load on core 0, {CONNECTIONS} connections (req/s)")
        _table(report, throughput(repo, work, args.duration, args.rounds, configs, "1", "0", args.warmup))
    print(f"\nuptime after: {uptime()}", flush=True)
    return 0


def _table(report: Callable[[str], None], rows: dict[str, dict[str, float]]) -> None:
    """req/s, then requests per CPU-second, each with its ratio to Triton's."""
    triton_row = rows.get("Triton 2.51", {})
    for title, suffix in (
        ("", ""),
        ("\nthe same rounds, requests per CPU-second of each server's process tree", "_cpu"),
    ):
        if title:
            report(title)
        report("| server | HTTP/JSON add_sub | vs Triton | gRPC add_sub | vs Triton |")
        report("|---|---|---|---|---|")
        for label, row in rows.items():
            cells = [f"| {label} "]
            for kind in ("http", "grpc"):
                value = row[kind + suffix]
                ratio = value / triton_row[kind + suffix] if triton_row else float("nan")
                cells.append(f"| {value:,.0f} | {ratio:.2f}x ")
            report("".join(cells) + "|")


if __name__ == "__main__":
    sys.exit(main())
