"""gRPC at concurrency 1: where a model process's extra latency goes, and whether idle CPUs explain it.

One ``tritonclient`` gRPC client calls the reference ``add_sub`` one request at a time against
``naiad serve`` (one process) with the model in the engine and in a model process (the default), and
prints for each: the client's p50, and the server's own figures per request from its statistics
(``compute_infer`` is the execution's round trip through the model process, or the model's call in
the engine).  Each pair runs twice: as the machine is, and with every CPU kept awake by a busy loop at
``SCHED_IDLE`` priority (``chrt -i 0``), which any other task preempts at once: the wake-up of a task on
an idle CPU then costs what it costs on a CPU that is running, as on a host whose idle CPUs poll.  If
the gap between the two servers were the idle CPUs' wake-ups, it would close with the spinners.

A watch before blocking (``NAIAD_PROCESS_SPIN_US``) yields the CPU between its reads, and with a
spinner on that CPU the yield hands it to the spinner until the next tick: compare with
``--watch-us 0``.

usage: python benchmarks/isolation/grpc_c1.py [--seconds 3] [--rounds 2] [--watch-us N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import tritonclient.grpc as grpcclient

from benchmarks.common.references import Served, naiad
from benchmarks.isolation.run import repository
from benchmarks.scaling.run import uptime


def p50_us(served: Served, seconds: float) -> float:
    """The client's median latency over ``seconds`` of calls, one at a time, after a warm-up."""
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{served.grpc_port}")
    operand = np.arange(4, dtype=np.float32)
    inputs = [grpcclient.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(operand)
    try:
        for _ in range(300):
            client.infer("add_sub", inputs)
        latencies = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            client.infer("add_sub", inputs)
            latencies.append(time.perf_counter() - started)
    finally:
        client.close()
    return statistics.median(latencies) * 1e6


def server_us(served: Served) -> dict[str, float]:
    """The server's statistics for ``add_sub``, per successful request, in microseconds."""
    url = f"{served.http_url}/v2/models/add_sub/stats"
    with urllib.request.urlopen(url) as answer:
        stats = json.load(answer)["model_stats"][0]["inference_stats"]
    count = stats["success"]["count"]
    return {key: stats[key]["ns"] / count / 1000 for key in ("success", "queue", "compute_infer")}


def spinners(on: bool) -> list[subprocess.Popen[bytes]]:
    """A busy loop at SCHED_IDLE priority on each CPU this process may use."""
    if not on:
        return []
    return [
        subprocess.Popen(
            ["chrt", "-i", "0", "taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"]
        )
        for cpu in sorted(os.sched_getaffinity(0))
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--watch-us", type=int, help="NAIAD_PROCESS_SPIN_US for the servers (default: theirs, 200)"
    )
    args = parser.parse_args(argv)
    if args.watch_us is not None:
        # (a watch yields the CPU between its reads: with a spinner there, the yield hands it over)
        os.environ["NAIAD_PROCESS_SPIN_US"] = str(args.watch_us)
    print(f"uptime: {uptime()}")
    repositories = {"in the engine": repository(1, True), "model process": repository(1, False)}
    print("| CPUs | round | model | client p50 | server: request / compute_infer |")
    print("|---|---:|---|---:|---:|")
    for round_ in range(args.rounds):
        for awake in (False, True):
            for label, repo in repositories.items():
                with naiad(repo, "--frontend-workers=0") as served:
                    running = spinners(awake)
                    try:
                        p50 = p50_us(served, args.seconds)
                    finally:
                        for spinner in running:
                            spinner.kill()
                            spinner.wait()
                    figures = server_us(served)
                print(
                    f"| {'kept awake' if awake else 'as they are'} | {round_ + 1} | {label} | {p50:.0f} us "
                    f"| {figures['success']:.1f} / {figures['compute_infer']:.1f} us |",
                    flush=True,
                )
    print(f"uptime after: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
