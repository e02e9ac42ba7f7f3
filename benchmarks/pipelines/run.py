"""The add_sub -> mul ensemble (``add_sub_mul``) over HTTP and gRPC: Naiad vs NVIDIA's real Triton, one run.

Both servers load the same repository (the example ``add_sub``, ``mul`` and ``add_sub_mul``: two
Python-backend steps, OUTPUT = (INPUT0 + INPUT1) * (INPUT0 - INPUT1)).  HTTP is driven by wrk (JSON
body, 1 thread), gRPC by h2load (``ModelInfer`` with raw contents, one stream per connection), with the
same connection count for both servers.  Before measuring, every server's answer is checked through
tritonclient on both protocols (load generators count any 200 as a success).  Servers are measured in
turns within each round and the medians of the rounds are reported, because a small shared machine is
noisy.  Targets: Naiad >= 0.8x Triton's throughput and p99 <= 1.5x Triton's, on each protocol.

usage: python benchmarks/pipelines/run.py [--rounds 3] [--duration 8] [--connections 16]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.references import ROOT, Served, naiad, triton

MODEL = "add_sub_mul"
INPUT0 = np.array([1, 2, 3, 4], dtype=np.float32)
INPUT1 = np.array([4, 3, 2, 1], dtype=np.float32)
EXPECTED = (INPUT0 + INPUT1) * (INPUT0 - INPUT1)


@dataclass
class Measurement:
    rps: float
    p50_ms: float
    p99_ms: float


def repository(root: Path) -> Path:
    repo = root / "models"
    for name in ("add_sub", "mul", MODEL):
        shutil.copytree(ROOT / "examples" / "model_repository" / name, repo / name)
    return repo


def http_script(root: Path) -> Path:
    body = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": INPUT0.tolist()},
            {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": INPUT1.tolist()},
        ]
    }
    script = root / "add_sub_mul.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f"wrk.body = '{json.dumps(body, separators=(',', ':'))}'\n"
    )
    return script


def grpc_body(root: Path) -> Path:
    request = pb.ModelInferRequest(model_name=MODEL)
    for name, array in (("INPUT0", INPUT0), ("INPUT1", INPUT1)):
        request.inputs.add(name=name, datatype="FP32", shape=[4])
        request.raw_input_contents.append(array.tobytes())
    message = request.SerializeToString()
    path = root / "add_sub_mul.grpc"
    path.write_bytes(b"\x00" + struct.pack(">I", len(message)) + message)
    return path


def check(server: Served) -> None:
    """The ensemble answers correctly over both protocols (what the load generators cannot see)."""
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(INPUT0)
    inputs[1].set_data_from_numpy(INPUT1)
    np.testing.assert_array_equal(client.infer(MODEL, inputs).as_numpy("OUTPUT"), EXPECTED)
    client.close()
    with grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as grpc_client:
        inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"), grpcclient.InferInput("INPUT1", [4], "FP32")]
        inputs[0].set_data_from_numpy(INPUT0)
        inputs[1].set_data_from_numpy(INPUT1)
        np.testing.assert_array_equal(grpc_client.infer(MODEL, inputs).as_numpy("OUTPUT"), EXPECTED)


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if match is None:
        raise ValueError(text)
    return float(match.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[match.group(2)]


def http_run(server: Served, script: Path, duration: int, connections: int) -> Measurement:
    url = f"{server.http_url}/v2/models/{MODEL}/infer"
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    failed = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if failed:
        raise RuntimeError(f"{server.name}: {failed.group(1)} failed HTTP responses")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    return Measurement(rps, p50, p99)


def grpc_run(server: Served, body: Path, requests: int, connections: int, log: Path) -> Measurement:
    url = f"http://127.0.0.1:{server.grpc_port}/inference.GRPCInferenceService/ModelInfer"
    log.unlink(missing_ok=True)  # h2load appends to its log
    out = subprocess.run(
        [
            "h2load",
            "-n",
            str(requests),
            "-c",
            str(connections),
            "-m",
            "1",
            "-d",
            str(body),
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            "--log-file",
            str(log),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = next(float(line.split()[3]) for line in out.splitlines() if line.startswith("finished in"))
    counts = next(line for line in out.splitlines() if line.startswith("requests:")).split()
    if int(counts[9]) or int(counts[11]):
        raise RuntimeError(f"{server.name}: h2load reports failed requests: {' '.join(counts)}")
    durations = sorted(int(line.split("\t")[2]) for line in log.read_text().splitlines() if line)
    p99 = durations[min(len(durations) - 1, int(len(durations) * 0.99))]
    return Measurement(rps, durations[len(durations) // 2] / 1000, p99 / 1000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=8, help="seconds per wrk run")
    parser.add_argument("--grpc-requests", type=int, default=20000)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args(argv)
    for tool in ("wrk", "h2load"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is missing (apt-get install -y wrk nghttp2-client)")
    results: dict[tuple[str, str], list[Measurement]] = {}
    with tempfile.TemporaryDirectory(prefix="pipelines-bench-") as tmp:
        root = Path(tmp)
        repo = repository(root)
        script, body = http_script(root), grpc_body(root)
        servers = [naiad(repo), triton(repo)]
        started: list[Served] = []
        try:
            for server in servers:
                started.append(server.__enter__())
            for server in started:
                check(server)
                http_run(server, script, 2, args.connections)  # warm-up
                grpc_run(
                    server, body, max(500, args.grpc_requests // 10), args.connections, root / "warm.log"
                )
            for round_ in range(args.rounds):
                for server in started:
                    for protocol in ("http", "grpc"):
                        if protocol == "http":
                            m = http_run(server, script, args.duration, args.connections)
                        else:
                            m = grpc_run(
                                server, body, args.grpc_requests, args.connections, root / "h2load.log"
                            )
                        results.setdefault((protocol, server.name), []).append(m)
                        print(
                            f"round {round_ + 1} {protocol:4} {server.name:6} {m.rps:8.0f} req/s "
                            f"p50 {m.p50_ms:6.2f} ms p99 {m.p99_ms:6.2f} ms",
                            flush=True,
                        )
            for server in started:
                check(server)
        finally:
            for server in started:
                server.__exit__(None, None, None)
    report(results, args)
    return 0


def report(results: dict[tuple[str, str], list[Measurement]], args: argparse.Namespace) -> None:
    print(f"\n{MODEL}: medians of {args.rounds} rounds, {args.connections} connections")
    print(f"{'protocol':8} {'server':7} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7}")
    medians: dict[tuple[str, str], Measurement] = {}
    for (protocol, name), runs in results.items():
        m = medians[(protocol, name)] = Measurement(
            statistics.median(r.rps for r in runs),
            statistics.median(r.p50_ms for r in runs),
            statistics.median(r.p99_ms for r in runs),
        )
        print(f"{protocol:8} {name:7} {m.rps:8.0f} {m.p50_ms:7.2f} {m.p99_ms:7.2f}")
    for protocol in ("http", "grpc"):
        ours, theirs = medians[(protocol, "naiad")], medians[(protocol, "triton")]
        print(
            f"{protocol}: throughput {ours.rps / theirs.rps:.2f}x Triton (target >= 0.8x), "
            f"p99 {ours.p99_ms / theirs.p99_ms:.2f}x Triton (target <= 1.5x)"
        )


if __name__ == "__main__":
    sys.exit(main())
