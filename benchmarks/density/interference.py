"""Do other models' loads slow a warm model down?  One server, warm requests while others churn.

The density benchmark (``run.py``) mixes everything (3 pods, forwarding, 200 models, Zipf traffic), so
its warm p99 under loads cannot say where the time goes.  This one isolates the effect on one
``naiad serve``:

* two *hot* models loaded at start and pinned (``--load-model``): an ONNX identity (runs in the
  server) and a Python model (runs in its model process);
* *churn* models loaded on demand (``--load-on-demand=churn_*``) under a ``--model-memory-budget``
  that holds only a few of them, with ``--min-residency-secs=0``: a request for one that is not loaded
  loads it, and the load evicts the least recently used one;
* a *warm* client process sends requests to the hot models at a fixed rate (alternating; HTTP), and a
  *probe* client times ``GET /v2/health/live`` at a fixed rate: it runs no model, so its latency is the
  server's event loop (and the CPU) alone;
* a *churn* client asks for the churn models one after the other in a closed loop, so that the server
  loads (and evicts) all the time.

Phases, interleaved over ``--rounds``: *quiet* (no churn); *onnx, no loads* (the churn client cycles
over three ONNX models loaded at start: other models' requests but no load: **the control**, the
reference for "do loads hurt warm requests", with the same clients and more CPU work than a churn
phase); *onnx churn* (30 ONNX models of 4 MiB weights, more than fit: a load and an eviction per
request); *python churn* (Python models holding 20 MiB buffers: a model process started per load).
Each phase prints the warm p50/p99 (all, and per hot model) and the probe's, loads per second (from
the server's metrics), and the server's CPU time (its process and its children, from /proc) per
second of the phase; the table at the end pools every round's samples per phase and gives each
phase's warm p99 against the control's and the quiet phase's of the same round.

usage: python benchmarks/density/interference.py [--rounds 3] [--secs 12] [--rate 100] [--probe-rate 20]
                                                 [--budget-mib 160] [--load-threads 4] [--py-spy DIR]
                                                 [-- SERVER ARGS]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common.references import free_port, naiad  # noqa: E402
from benchmarks.density.models import WIDTH, Kind, write_repository  # noqa: E402
from benchmarks.density.run import scrape, uptime  # noqa: E402

HOT = (Kind("hot_onnx", "onnx-identity", 0, 1), Kind("hot_py", "python", 5, 1))
#: Loaded at start too: the control phase runs requests on them (other models' work, but no loads).
OTHERS = Kind("other_onnx", "onnx-matmul", 4, 3)
CHURN = {
    "onnx": Kind("churn_onnx", "onnx-matmul", 4, 30),
    "python": Kind("churn_py", "python", 20, 6),
}
#: The reference phase: the churn client's requests go to loaded models, so nothing loads.
CONTROL = "onnx, no loads"
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its children, living and reaped (from /proc)."""
    total = 0.0
    pids = [pid]
    try:
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime stime cutime cstime: fields 14-17 of stat, 12-15 after the command
        total += sum(int(f) for f in fields[11:15]) / _TICKS
    return total


def _warm(job: tuple[int, float, float, Any]) -> list[tuple[str, float]]:
    """Paced inference on the hot models: (model kind, latency in ms) each (every answer checked)."""
    http, secs, rate, barrier = job
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{http}", network_timeout=120)
    x = np.arange(WIDTH, dtype=np.float32).reshape(1, WIDTH) / WIDTH
    latencies: list[tuple[str, float]] = []
    barrier.wait()
    start, sent = time.monotonic(), 0
    while (due := start + sent / rate) - start < secs:
        time.sleep(max(0.0, due - time.monotonic()))
        kind = HOT[sent % len(HOT)]
        model = kind.prefix + "_000"
        sent += 1
        tensor = httpclient.InferInput("INPUT0", [1, WIDTH], "FP32")
        tensor.set_data_from_numpy(x)
        t0 = time.perf_counter()
        got = client.infer(model, [tensor]).as_numpy("OUTPUT0")
        latencies.append((kind.prefix, (time.perf_counter() - t0) * 1000))
        if got is None or not np.allclose(got, x, atol=1e-5):
            raise AssertionError(f"wrong answer from {model}: {got!r}")
    client.close()
    return latencies


def _probe(job: tuple[int, float, float, Any]) -> list[float]:
    """Paced ``GET /v2/health/live`` (no model runs): the server's event loop lag, in ms."""
    port, secs, rate, barrier = job
    from http.client import HTTPConnection

    connection = HTTPConnection("127.0.0.1", port, timeout=120)
    latencies: list[float] = []
    barrier.wait()
    start, sent = time.monotonic(), 0
    while (due := start + sent / rate) - start < secs:
        time.sleep(max(0.0, due - time.monotonic()))
        sent += 1
        t0 = time.perf_counter()
        connection.request("GET", "/v2/health/live")
        response = connection.getresponse()
        response.read()
        latencies.append((time.perf_counter() - t0) * 1000)
        if response.status != 200:
            raise AssertionError(f"health/live answered {response.status}")
    connection.close()
    return latencies


def _churn(job: tuple[int, float, list[str], Any]) -> list[float]:
    """Closed loop over the churn models (each request a load, as the budget holds few): latencies."""
    http, secs, models, barrier = job
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{http}", network_timeout=120)
    x = np.arange(WIDTH, dtype=np.float32).reshape(1, WIDTH) / WIDTH
    latencies: list[float] = []
    barrier.wait()
    start, turn = time.monotonic(), 0
    while time.monotonic() - start < secs:
        tensor = httpclient.InferInput("INPUT0", [1, WIDTH], "FP32")
        tensor.set_data_from_numpy(x)
        t0 = time.perf_counter()
        client.infer(models[turn % len(models)], [tensor])
        latencies.append((time.perf_counter() - t0) * 1000)
        turn += 1
    client.close()
    return latencies


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank; NaN for none)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def phase(
    http: int, metrics: int, pid: int, args: argparse.Namespace, churn: list[str], profile: Path | None
) -> dict[str, Any]:
    """One phase: warm + probe clients, and the churn client when ``churn`` names models; with
    ``profile``, py-spy samples the server's threads meanwhile (collapsed stacks per thread, only
    the samples of the thread holding the GIL), without pausing it."""
    context = multiprocessing.get_context("spawn")
    jobs: list[tuple[Any, Any]] = []
    with context.Manager() as manager:
        barrier = manager.Barrier(3 if churn else 2)
        jobs = [
            (_warm, (http, args.secs, args.rate, barrier)),
            (_probe, (http, args.secs, args.probe_rate, barrier)),
        ]
        if churn:
            jobs.append((_churn, (http, args.secs, churn, barrier)))
        with context.Pool(len(jobs)) as pool:
            spy = None
            if profile is not None:
                spy = subprocess.Popen(
                    [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--duration",
                     str(int(args.secs)), "--rate", "200", "--format", "raw", "--threads", "--gil",
                     "--nonblocking", "--output", str(profile)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
            before, cpu0, t0 = scrape([metrics]), cpu_seconds(pid), time.monotonic()
            pending = [pool.apply_async(fn, (job,)) for fn, job in jobs]
            results = [p.get() for p in pending]
            elapsed, cpu = time.monotonic() - t0, cpu_seconds(pid) - cpu0
            after = scrape([metrics])
            if spy is not None:
                spy.wait()
    loads = (
        after["naiad_model_loads_total{reason=on_demand}"]
        - before["naiad_model_loads_total{reason=on_demand}"]
    )
    warm = [latency for _, latency in results[0]]
    by_model = {kind.prefix: [ms for prefix, ms in results[0] if prefix == kind.prefix] for kind in HOT}
    probe = results[1]
    return {
        "warm": warm,
        "by_model": by_model,
        "probe": probe,
        "warm_p50": pct(warm, 0.5),
        "warm_p99": pct(warm, 0.99),
        "probe_p50": pct(probe, 0.5),
        "probe_p99": pct(probe, 0.99),
        "loads_per_s": loads / elapsed,
        "load_p50": pct(results[2], 0.5) if churn else float("nan"),
        "cpu_per_s": cpu / elapsed,
    }


def describe(result: dict[str, Any]) -> str:
    per_model = ", ".join(f"{prefix} p99 {pct(ms, 0.99):.1f}" for prefix, ms in result["by_model"].items())
    return (
        f"warm p50 {result['warm_p50']:.1f} ms p99 {result['warm_p99']:.1f} ms ({len(result['warm'])}; "
        f"{per_model}), probe p50 {result['probe_p50']:.1f} p99 {result['probe_p99']:.1f} ms, "
        f"{result['loads_per_s']:.1f} loads/s (churn request p50 {result['load_p50']:.0f} ms), "
        f"server CPU {result['cpu_per_s']:.2f} s/s"
    )


def summary(rows: dict[str, list[dict[str, Any]]]) -> None:
    """The table: latencies pooled over the rounds (a p99 over every round's samples, so that it rests
    on dozens of requests, not the 4th-worst of one phase), and each phase's warm p99 against the
    control's (other models run, nothing loads) and the quiet phase's of the same round (medians over
    rounds).  The control is the reference for "do loads hurt warm requests": it has the same clients
    and more CPU work, only no load."""
    print("| phase | warm p50 | warm p99 | p99 / control | p99 / quiet | " + " | ".join(
        f"{kind.prefix} p99" for kind in HOT
    ) + " | probe p99 | probe p99 / control | loads/s | CPU s/s |")  # fmt: skip
    print("|---" * (9 + len(HOT)) + "|")
    for label, results in rows.items():

        def pooled(pick: Any, q: float, results: list[dict[str, Any]] = results) -> float:
            return pct([ms for x in results for ms in pick(x)], q)

        def ratio(key: str, to: str, results: list[dict[str, Any]] = results) -> float:
            return statistics.median(x[key] / ref[key] for x, ref in zip(results, rows[to], strict=True))

        per_model = " | ".join(
            f"{pooled(lambda x, k=kind.prefix: x['by_model'][k], 0.99):.1f} ms" for kind in HOT
        )
        print(
            f"| {label} | {pooled(lambda x: x['warm'], 0.5):.1f} ms | "
            f"{pooled(lambda x: x['warm'], 0.99):.1f} ms | {ratio('warm_p99', CONTROL):.2f}x | "
            f"{ratio('warm_p99', 'quiet'):.2f}x | {per_model} | "
            f"{pooled(lambda x: x['probe'], 0.99):.1f} ms | {ratio('probe_p99', CONTROL):.2f}x | "
            f"{statistics.median(x['loads_per_s'] for x in results):.1f} | "
            f"{statistics.median(x['cpu_per_s'] for x in results):.2f} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--secs", type=float, default=12.0, help="seconds per phase")
    parser.add_argument("--rate", type=float, default=100.0, help="warm requests/s")
    parser.add_argument("--probe-rate", type=float, default=20.0, help="health probes/s")
    parser.add_argument("--budget-mib", type=int, default=160, help="--model-memory-budget of the server")
    parser.add_argument("--load-threads", type=int, default=4, help="--model-load-thread-count")
    parser.add_argument(
        "--py-spy", type=Path, help="a folder: py-spy samples of the server's GIL holder per phase go there"
    )
    parser.add_argument("server_args", nargs="*", help="more naiad serve arguments (after --)")
    args = parser.parse_args(argv)
    print(f"start: {uptime()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-interference-") as tmp:
        repo = Path(tmp)
        write_repository(repo, (*HOT, OTHERS, *CHURN.values()))
        metrics = free_port()
        server = naiad(
            repo,
            "--model-control-mode=explicit",
            *(f"--load-model={kind.prefix}_000" for kind in HOT),
            *(f"--load-model={OTHERS.prefix}_{i:03d}" for i in range(OTHERS.count)),
            "--load-on-demand=churn_*",
            f"--model-memory-budget={args.budget_mib}M",
            "--min-residency-secs=0",
            f"--model-load-thread-count={args.load_threads}",
            *args.server_args,
        )
        server.command = [c for c in server.command if not c.startswith("--metrics-port=")]
        server.command.append(f"--metrics-port={metrics}")
        with server:
            assert server.process is not None
            pid = server.process.pid
            names = {
                key: [f"{kind.prefix}_{i:03d}" for i in range(kind.count)] for key, kind in CHURN.items()
            }
            names["others"] = [f"{OTHERS.prefix}_{i:03d}" for i in range(OTHERS.count)]
            rows: dict[str, list[dict[str, Any]]] = {
                "quiet": [],
                "onnx, no loads": [],
                "onnx churn": [],
                "python churn": [],
            }
            for r in range(args.rounds):
                for label, churn in (
                    ("quiet", []),
                    ("onnx, no loads", names["others"]),
                    ("onnx churn", names["onnx"]),
                    ("python churn", names["python"]),
                ):
                    profile = None
                    if args.py_spy is not None:
                        profile = args.py_spy / f"round{r + 1}-{label.replace(' ', '-').replace(',', '')}.txt"
                    result = phase(server.http_port, metrics, pid, args, churn, profile)
                    rows[label].append(result)
                    print(f"round {r + 1} {label:>14}: {describe(result)}  [{uptime()}]", flush=True)
            with open(server.log.name) as log:
                failures = [line for line in log if "Traceback" in line or "failed to load" in line]
    print(f"\n{args.rounds} rounds: percentiles over all rounds' samples; ratios per round, then median")
    summary(rows)
    print(f"server log lines with failures: {len(failures)}")
    print(f"end: {uptime()}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
