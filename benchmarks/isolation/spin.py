"""The bounded watch before blocking (``NAIAD_PROCESS_SPIN_US``): HTTP ``add_sub`` with model processes
at several watch lengths, and the model inside the engine, side by side in one run.

For each server and concurrency (wrk, interleaved rounds, medians): p50 latency, requests/s, the CPU
time of the server's whole process tree per request (user + system from ``/proc``: the figure that
survives a shared machine), and its context switches per request (voluntary + involuntary, every
thread, from ``/proc``): how often a process of the tree slept or was preempted per request.  ``PIN=1``
pins the servers to cpu 1 and wrk to cpu 0.

usage: python benchmarks/isolation/spin.py [--duration 4] [--rounds 3] [--connections 1,16] [--spins 0,100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.references import Served, naiad
from benchmarks.common.wrk import ADD_SUB_SCRIPT, wrk
from benchmarks.isolation.run import cpu_seconds, repository, tree


def switches(pid: int) -> int:
    """Context switches so far of every thread of the process tree under ``pid``."""
    total = 0
    for member in tree(pid):
        try:
            tasks = os.listdir(f"/proc/{member}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                for line in Path(f"/proc/{member}/task/{task}/status").read_text().splitlines():
                    if "ctxt_switches" in line:
                        total += int(line.split()[1])
            except OSError:
                continue
    return total


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", default="1,16")
    parser.add_argument("--spins", default="0,100")
    args = parser.parse_args()
    connections = [int(c) for c in args.connections.split(",")]
    print(f"load before: {_uptime()}")
    servers: dict[str, Served] = {}
    for spin in args.spins.split(","):
        server = naiad(repository(1, False))
        server.command = ["env", f"NAIAD_PROCESS_SPIN_US={spin}", *server.command]
        servers[f"spin {spin} us"] = server
    servers["in the engine"] = naiad(repository(1, True))
    if os.environ.get("PIN") == "1":
        for server in servers.values():
            server.command = ["taskset", "-c", "1", *server.command]
        os.sched_setaffinity(0, {0})  # wrk inherits it
    results: dict[tuple[str, int], list[tuple[float, float, float, float]]] = {}
    started: list[Served] = []
    try:
        for server in servers.values():
            started.append(server.__enter__())
        for server in started:  # warm-up
            wrk(f"{server.http_url}/v2/models/add_sub/infer", ADD_SUB_SCRIPT, 2, 1)
        for _ in range(args.rounds):
            for count in connections:
                for name, server in servers.items():
                    assert server.process is not None
                    pid = server.process.pid
                    cpu, switched = cpu_seconds(pid), switches(pid)
                    url = f"{server.http_url}/v2/models/add_sub/infer"
                    run = wrk(url, ADD_SUB_SCRIPT, args.duration, count)
                    answered = run["rps"] * args.duration
                    results.setdefault((name, count), []).append(
                        (
                            run["p50"] * 1000,
                            run["rps"],
                            (cpu_seconds(pid) - cpu) / answered * 1e6,
                            (switches(pid) - switched) / answered,
                        )
                    )
    finally:
        for server in started:
            server.__exit__(None, None, None)
    print(f"HTTP add_sub, medians of {args.rounds} rounds of {args.duration} s:")
    for (name, count), rows in results.items():
        p50, rps, cpu_us, per = (statistics.median(row[i] for row in rows) for i in range(4))
        print(
            f"  {name:<14} c={count:<2} p50 {p50:5.0f} us  {rps:6.0f} req/s  {cpu_us:4.0f} CPU-us/req  "
            f"{per:4.2f} switches/req  (p50 per round: {[round(row[0]) for row in rows]})"
        )
    print(f"load after: {_uptime()}")


if __name__ == "__main__":
    main()
