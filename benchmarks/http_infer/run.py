"""HTTP/JSON inference throughput on ``add_sub``: Naiad vs real Triton vs MLServer, one run.

Drives each server with wrk (1 thread, 16 connections, the reference ``add_sub.lua`` body) for several
interleaved rounds, so machine noise spreads over all three, and prints the median req/s, p50 and p99 of
each and the ratios.  Also reports Naiad's idle RSS with the example repository loaded.

usage: python benchmarks/http_infer/run.py [--duration 8] [--rounds 3] [--connections 16] [--skip-mlserver]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.references import (
    ROOT,
    Served,
    mlserver,
    naiad,
    reference_add_sub_repository,
    rss_mb,
    triton,
)
from benchmarks.common.wrk import wrk_add_sub


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--skip-mlserver", action="store_true")
    args = parser.parse_args()

    idle = naiad(ROOT / "examples" / "model_repository")
    with idle:
        time.sleep(2)
        assert idle.process is not None
        idle_rss = rss_mb(idle.process.pid)

    repo = reference_add_sub_repository()
    servers: list[Served] = [naiad(repo), triton(repo)]
    if not args.skip_mlserver:
        servers.append(mlserver())
    results: dict[str, list[dict[str, float]]] = {s.name: [] for s in servers}
    started: list[Served] = []
    try:
        for server in servers:
            started.append(server.__enter__())
        for server in started:  # warm-up
            wrk_add_sub(server.http_url, 2, args.connections)
        for _ in range(args.rounds):
            for server in started:
                results[server.name].append(wrk_add_sub(server.http_url, args.duration, args.connections))
    finally:
        for server in started:
            server.__exit__(None, None, None)

    med = {
        name: {k: statistics.median(r[k] for r in runs) for k in ("rps", "p50", "p99")}
        for name, runs in results.items()
    }
    print(
        f"add_sub over HTTP/JSON, wrk -t1 -c{args.connections}, "
        f"{args.rounds} x {args.duration}s rounds (medians)"
    )
    print(f"{'server':10} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for name, m in med.items():
        print(f"{name:10} {m['rps']:10.0f} {m['p50']:8.2f} {m['p99']:8.2f}")
    ours = med["naiad"]["rps"]
    print(f"naiad / triton   = {ours / med['triton']['rps']:.2f}x  (target >= 0.5x)")
    if "mlserver" in med:
        print(f"naiad / mlserver = {ours / med['mlserver']['rps']:.2f}x  (target >= 2x)")
    print(f"naiad idle RSS with examples/model_repository: {idle_rss:.0f} MiB (target < 300 MiB)")


if __name__ == "__main__":
    main()
