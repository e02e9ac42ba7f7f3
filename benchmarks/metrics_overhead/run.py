"""What metrics cost: ``add_sub`` over HTTP/JSON with metrics on (scraped) vs ``--allow-metrics=false``.

Both servers run at once and are driven by wrk in interleaved rounds, so machine noise spreads over
both; the metrics-on server keeps its defaults (Triton's counters, Naiad's latency histograms, CPU
gauges polled every 2 s) and is scraped once a second throughout, more often than Prometheus would.
Prints the median req/s, p50 and p99 of each and the throughput cost of metrics, the median of the
per-round on/off ratios (target: <= 5%).
The per-request counting (statistics and histogram buckets) runs with metrics off too, since the
statistics extension reads the same counters; its cost is timed separately and reported beside.

usage: python benchmarks/metrics_overhead/run.py [--duration 8] [--rounds 5] [--connections 16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from naiad.scheduling.stats import SchedulerStats

from benchmarks.common.references import Served, free_port, naiad, reference_add_sub_repository
from benchmarks.common.wrk import wrk_add_sub


def observe_ns(calls: int = 200_000) -> float:
    """Nanoseconds per ``SchedulerStats.observe`` (the histogram recording every successful request
    pays, with metrics on or off), on this machine."""
    stats = SchedulerStats(lambda: 0)
    started = time.perf_counter_ns()
    for i in range(calls):
        stats.observe(100_000 + i, 20_000, 5_000, 60_000, 5_000)
    return (time.perf_counter_ns() - started) / calls


def scrape_every_second(url: str, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        with urllib.request.urlopen(url, timeout=5) as response:
            response.read()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()

    repo = reference_add_sub_repository()
    metrics_port = free_port()
    on = naiad(repo, f"--metrics-port={metrics_port}")
    on.name = "metrics on"
    off = naiad(repo, "--allow-metrics=false")
    off.name = "metrics off"
    results: dict[str, list[dict[str, float]]] = {on.name: [], off.name: []}
    stop = threading.Event()
    started: list[Served] = []
    try:
        for server in (on, off):
            started.append(server.__enter__())
        scraper = threading.Thread(
            target=scrape_every_second, args=(f"http://127.0.0.1:{metrics_port}/metrics", stop), daemon=True
        )
        scraper.start()
        for server in started:  # warm-up
            wrk_add_sub(server.http_url, 2, args.connections)
        for round_ in range(args.rounds):
            order = started if round_ % 2 == 0 else started[::-1]
            for server in order:
                results[server.name].append(wrk_add_sub(server.http_url, args.duration, args.connections))
    finally:
        stop.set()
        for server in started:
            server.__exit__(None, None, None)

    med = {
        name: {k: statistics.median(r[k] for r in runs) for k in ("rps", "p50", "p99")}
        for name, runs in results.items()
    }
    print(
        f"add_sub over HTTP/JSON, wrk -t1 -c{args.connections}, "
        f"{args.rounds} x {args.duration}s interleaved rounds (medians)"
    )
    print(f"{'server':12} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8}   rounds (req/s)")
    for name, m in med.items():
        rounds = " ".join(f"{r['rps']:.0f}" for r in results[name])
        print(f"{name:12} {m['rps']:10.0f} {m['p50']:8.2f} {m['p99']:8.2f}   {rounds}")
    # Each round ran the two back to back, so a round's ratio is the least disturbed by machine drift.
    ratios = [a["rps"] / b["rps"] for a, b in zip(results["metrics on"], results["metrics off"], strict=True)]
    cost = 1 - statistics.median(ratios)
    print(f"throughput cost of metrics: {cost * 100:.1f}% (median of per-round on/off ratios; target <= 5%)")
    recording = observe_ns()
    share = recording * med["metrics off"]["rps"] / 1e9
    print(f"histogram recording: {recording:.0f} ns a request = {share * 100:.2f}% of the loop at that rate")


if __name__ == "__main__":
    main()
