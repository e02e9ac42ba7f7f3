"""Is ``naiad perf`` a fast enough load generator?  It against wrk (HTTP) and h2load (gRPC), same server.

One ``naiad serve`` with the reference ``add_sub`` model, pinned to CPU 0 with taskset; every load
generator pinned to CPU 1, so each gets the same single core and the server the other.  Each round runs,
in turn: wrk with the JSON body of ``../shared/reference/add_sub.lua``; ``naiad perf`` with the same JSON
request (``--input-tensor-format json --output-tensor-format json``) at the same 16 connections; h2load
with the raw-contents ``ModelInferRequest`` of ``make_grpc_body.py`` over 16 connections; ``naiad perf
-i grpc`` at concurrency 16.  It prints every round, the medians and ``naiad perf``'s ratio to each
(target: at least 0.8).  wrk and h2load count any HTTP 200 as a success; ``naiad perf`` checks every
answer, and a run with a failed request fails the benchmark.

usage: python benchmarks/perf_tool/run.py [--rounds 3] [--seconds 6] [--connections 16]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from tritonclient.grpc import service_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.references import ROOT, Served, free_port, reference_add_sub_repository
from benchmarks.common.wrk import ADD_SUB_SCRIPT, wrk

NAIAD = str(ROOT / ".venv" / "bin" / "naiad")


PIN = {"on": True}


def pinned(cpu: str, command: list[str]) -> list[str]:
    """``command`` on one CPU (where taskset exists, this machine has more than one, and not --no-pin)."""
    if not PIN["on"] or shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2:
        return command
    return ["taskset", "-c", cpu, *command]


def grpc_body(path: Path) -> Path:
    """The length-prefixed gRPC message h2load sends (as ``../shared/reference/make_grpc_body.py``)."""
    request = pb.ModelInferRequest(model_name="add_sub")
    for name, array in (("INPUT0", np.arange(4, dtype=np.float32)), ("INPUT1", np.ones(4, dtype=np.float32))):
        request.inputs.add(name=name, datatype="FP32", shape=[4])
        request.raw_input_contents.append(array.tobytes())
    message = request.SerializeToString()
    path.write_bytes(b"\x00" + struct.pack(">I", len(message)) + message)
    return path


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def h2load(port: int, body: Path, requests: int, connections: int, cpu: str) -> tuple[float, float]:
    """req/s and the client's CPU microseconds per request."""
    spent = _children_cpu()
    out = subprocess.run(
        pinned(cpu, ["h2load", "-n", str(requests), "-c", str(connections), "-m", "1", "-d", str(body),
                     "-H", "content-type: application/grpc", "-H", "te: trailers",
                     f"http://127.0.0.1:{port}/inference.GRPCInferenceService/ModelInfer"]),
        capture_output=True, text=True, check=True,
    ).stdout
    done = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out)
    if done is None or int(done.group(1)) != requests:
        raise RuntimeError(f"h2load: not every request succeeded:\n{out}")
    rate = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    if rate is None:
        raise RuntimeError(f"h2load output has no rate:\n{out}")
    return float(rate.group(1)), (_children_cpu() - spent) * 1e6 / requests


def naiad_perf(url: str, protocol: str, seconds: int, connections: int, cpu: str) -> tuple[float, float]:
    """Inferences/s and the load generator's CPU microseconds per request (its ``-v`` figure)."""
    args = ["-m", "add_sub", "-i", protocol, "-u", url, "--concurrency-range", str(connections),
            "-p", str(seconds * 1000 // 3), "-r", "3", "-s", "100", "-v"]
    if protocol == "http":
        args += ["--input-tensor-format", "json", "--output-tensor-format", "json"]
    done = subprocess.run(pinned(cpu, [NAIAD, "perf", *args]), capture_output=True, text=True)
    if done.returncode != 0 or "Error count" in done.stdout:
        raise RuntimeError(f"naiad perf failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    match = re.search(r"Throughput: ([\d.e+]+) infer/sec", done.stdout)
    cpu_match = re.search(r"\(([\d.]+) usec CPU per request\)", done.stdout)
    if match is None or cpu_match is None:
        raise RuntimeError(f"naiad perf printed no throughput:\n{done.stdout}")
    return float(match.group(1)), float(cpu_match.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=6, help="length of each measurement")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--no-pin", action="store_true", help="let the OS place the server and the clients")
    args = parser.parse_args(argv)
    PIN["on"] = not args.no_pin
    for tool in ("wrk", "h2load"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is missing: apt-get install -y wrk nghttp2-client")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    repository = reference_add_sub_repository()
    http, grpc_port, metrics = free_port(), free_port(), free_port()
    command = pinned("0", [NAIAD, "serve", f"--model-repository={repository}", f"--http-port={http}",
                           f"--grpc-port={grpc_port}", f"--metrics-port={metrics}"])
    figures: dict[str, list[float]] = {"wrk": [], "perf http": [], "h2load": [], "perf grpc": []}
    cpu: dict[str, list[float]] = {key: [] for key in figures}
    with tempfile.TemporaryDirectory() as scratch, Served("naiad", command, http, grpc_port):
        body = grpc_body(Path(scratch) / "add_sub.grpc")
        url = f"http://127.0.0.1:{http}/v2/models/add_sub/infer"
        wrk(url, ADD_SUB_SCRIPT, 2, args.connections)  # warm-up
        for round_ in range(1, args.rounds + 1):
            seconds, connections = args.seconds, args.connections
            results = {"wrk": wrk_pinned(url, seconds, connections)}
            results["perf http"] = naiad_perf(f"127.0.0.1:{http}", "http", seconds, connections, "1")
            requests = int(max(results["wrk"][0], 1000) * seconds / 2)  # about `seconds` over gRPC
            results["h2load"] = h2load(grpc_port, body, requests, connections, "1")
            results["perf grpc"] = naiad_perf(f"127.0.0.1:{grpc_port}", "grpc", seconds, connections, "1")
            for key, (rate, spent) in results.items():
                figures[key].append(rate)
                cpu[key].append(spent)
            wrk_rps, perf_http, h2_rps, perf_grpc = (results[k][0] for k in figures)
            print(f"round {round_}: wrk {wrk_rps:,.0f}  naiad perf http {perf_http:,.0f}  "
                  f"h2load {h2_rps:,.0f}  naiad perf grpc {perf_grpc:,.0f} req/s", flush=True)
    median = {key: statistics.median(values) for key, values in figures.items()}
    us = {key: statistics.median(values) for key, values in cpu.items()}
    print()
    print("| protocol | reference | reference req/s | naiad perf req/s | naiad perf / reference | "
          "client CPU us/request: reference, naiad perf |")
    print("|---|---|---:|---:|---:|---:|")
    for label, ref, ours in (("HTTP/JSON", "wrk", "perf http"), ("gRPC", "h2load", "perf grpc")):
        ratio = median[ours] / median[ref]
        print(f"| {label} | {ref} | {median[ref]:,.0f} | {median[ours]:,.0f} | {ratio:.2f}x | "
              f"{us[ref]:.0f}, {us[ours]:.0f} |")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    return 0


def wrk_pinned(url: str, seconds: int, connections: int) -> tuple[float, float]:
    """wrk on CPU 1 (``benchmarks.common.wrk`` runs it unpinned): req/s and CPU microseconds per request."""
    spent = _children_cpu()
    out = subprocess.run(
        pinned("1", ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", str(ADD_SUB_SCRIPT), url]),
        capture_output=True, text=True, check=True,
    ).stdout
    if re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        raise RuntimeError(f"wrk: failed responses:\n{out}")
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    if match is None or total is None:
        raise RuntimeError(f"wrk printed no rate:\n{out}")
    return float(match.group(1)), (_children_cpu() - spent) * 1e6 / int(total.group(1))


if __name__ == "__main__":
    sys.exit(main())
