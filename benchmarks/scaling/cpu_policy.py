"""What ``--cpu-policy`` is worth: one running server, its policy switched between rounds.

``naiad serve`` puts its threads under ``SCHED_BATCH`` (see naiad.core.cpu_policy).  This starts one
server, ``--frontend-workers 1`` with the engine and the load generator pinned to core 0 and the
worker's process to core 1 (``--in-process``: the single-process server on core 1), and between rounds
sets every thread of the process on core 1 to ``SCHED_OTHER`` or ``SCHED_BATCH`` (``sched_setscheduler``
on each thread id, as ``chrt -a`` does), so both policies are measured on the same process, warmed up
alike.  For each policy, unary gRPC ``add_sub`` calls from h2load and HTTP/JSON ``add_sub`` requests
from wrk, each at 16 connections and at one: requests per second, CPU per request of the process on
core 1, its context switches per request (``/proc``), and the load generator's latency (h2load's mean,
wrk's median and 99th percentile).  Medians of ``--rounds``; the ratio is SCHED_BATCH over SCHED_OTHER.

usage: python benchmarks/scaling/cpu_policy.py [--rounds 3] [--in-process]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.scratch import scratch
from benchmarks.common.wrk import ADD_SUB_SCRIPT, wrk
from benchmarks.grpc_infer.run import grpc_body, h2load_command
from benchmarks.scaling.run import (
    CONNECTIONS,
    Run,
    add_sub_workload,
    cpu_seconds,
    median,
    repository,
    serve,
    taskset,
    uptime,
)
from benchmarks.scaling.worker_core import pin_apart

POLICIES = {"SCHED_OTHER": os.SCHED_OTHER, "SCHED_BATCH": os.SCHED_BATCH}
#: (connections, gRPC calls) per measurement.
LOADS = ((CONNECTIONS, 20_000), (1, 3_000))
#: Seconds of HTTP load per measurement.
HTTP_SECONDS = 4


def _threads(pid: int) -> list[int]:
    return [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]


def _set_policy(pids: list[int], policy: int) -> None:
    for pid in pids:
        for tid in _threads(pid):
            try:
                os.sched_setscheduler(tid, policy, os.sched_param(0))
            except ProcessLookupError:
                continue


def _switches(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        for tid in _threads(pid):
            try:
                for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                    if "ctxt_switches:" in line:  # voluntary and involuntary
                        total += int(line.split()[1])
            except FileNotFoundError:
                continue
    return total


def _h2load(port: int, body: Path, calls: int, connections: int) -> tuple[float, float]:
    """(calls per second, mean request time in microseconds)."""
    url = f"http://127.0.0.1:{port}/inference.GRPCInferenceService/ModelInfer"
    command = h2load_command(url, body, calls, connections)
    out = subprocess.run(taskset("0", command), capture_output=True, text=True, check=True).stdout
    if f"{calls} succeeded" not in out:
        raise RuntimeError(f"failed calls:\n{out}")
    rate = next(float(line.split()[3]) for line in out.splitlines() if line.startswith("finished in"))
    mean = next(line.split()[5] for line in out.splitlines() if line.startswith("time for request"))
    scale = {"us": 1.0, "ms": 1e3, "s": 1e6}
    unit = next(u for u in ("us", "ms", "s") if mean.endswith(u))
    return rate, float(mean.removesuffix(unit)) * scale[unit]


def _wrk(url: str, connections: int) -> tuple[float, str]:
    """(requests per second, "median / p99 latency") from wrk, on this process's core."""
    result = wrk(url, ADD_SUB_SCRIPT, HTTP_SECONDS, connections)
    return result["rps"], f"p50 {result['p50'] * 1e3:.0f} / p99 {result['p99'] * 1e3:.0f} us"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-process", action="store_true", help="the single-process server on core 1")
    args = parser.parse_args(argv)
    os.sched_setaffinity(0, {0})  # the load generators (wrk, h2load) run where this process runs
    print(f"uptime: {uptime()}")
    repo = repository(in_engine=True)
    work = scratch("bench-cpu-policy-")
    rows: dict[tuple[str, str, int], list[tuple[float, float, float, float | str]]] = {}
    with serve(
        "naiad", repo, "1" if args.in_process else None, workers=0 if args.in_process else 1
    ) as served:
        assert served.process is not None
        pid = served.process.pid
        watched = [pid]
        if not args.in_process:
            watched = pin_apart(pid)
        run = Run(served, work, "0")
        time.sleep(2)
        body = grpc_body(add_sub_workload(1), work / "add_sub.bin")
        url = f"{served.http_url}/v2/models/add_sub/infer"
        run.grpc(add_sub_workload(2_000))  # warm-up, and the answers checked
        for _ in range(args.rounds):
            for name, policy in POLICIES.items():
                _set_policy(watched, policy)
                for protocol in ("gRPC", "HTTP/JSON"):
                    for connections, calls in LOADS:
                        switches, cpu = _switches(watched), sum(cpu_seconds(p) for p in watched)
                        latency: float | str
                        if protocol == "gRPC":
                            rate, latency = _h2load(served.grpc_port, body, calls, connections)
                        else:
                            rate, latency = _wrk(url, connections)
                            calls = int(rate * HTTP_SECONDS)
                        switches = _switches(watched) - switches
                        cpu = sum(cpu_seconds(p) for p in watched) - cpu
                        rows.setdefault((protocol, name, connections), []).append(
                            (rate, cpu / calls * 1e6, switches / calls, latency)
                        )
    where = "the single-process server" if args.in_process else "one frontend worker"
    print(f"add_sub, {where} on core 1, the load on core 0; medians of {args.rounds} rounds")
    print(
        "| protocol | policy | connections | requests/s | CPU per request | context switches per request "
        "| latency |"
    )
    print("|---|---|---:|---:|---:|---:|---|")
    for protocol in ("gRPC", "HTTP/JSON"):
        for connections, _ in LOADS:
            base = median([r[0] for r in rows[(protocol, "SCHED_OTHER", connections)]])
            for name in POLICIES:
                figures = rows[(protocol, name, connections)]
                rate = median([r[0] for r in figures])
                latencies = [r[3] for r in figures]
                latency = (
                    f"mean {median([float(x) for x in latencies]):.0f} us"
                    if protocol == "gRPC"
                    else " ; ".join(str(x) for x in latencies)
                )
                print(
                    f"| {protocol} | {name} | {connections} | {rate:,.0f} ({rate / base:.2f}x) "
                    f"| {median([r[1] for r in figures]):.1f} us | {median([r[2] for r in figures]):.1f} "
                    f"| {latency} |"
                )
    print(f"uptime after: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
