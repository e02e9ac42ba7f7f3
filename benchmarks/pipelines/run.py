"""The add_sub -> mul ensemble (``add_sub_mul``) over HTTP and gRPC: Naiad vs NVIDIA's real Triton, one run.

Both servers load the same repository (the example ``add_sub``, ``mul`` and ``add_sub_mul``: two
Python-backend steps, OUTPUT = (INPUT0 + INPUT1) * (INPUT0 - INPUT1)).  HTTP is driven by wrk (JSON
body, 1 thread), gRPC by h2load (``ModelInfer`` with raw contents, one stream per connection), with the
same connection count for both servers.  ``add_sub`` alone is measured the same way as a baseline, so
the cost of the ensemble can be told from the cost of the frontend.  Before measuring, every answer is
checked through tritonclient on both protocols (load generators count any 200 as a success).  Servers
are measured in turns within each round and the medians of the rounds are reported, because a small
shared machine is noisy.  Targets: on ``add_sub_mul``, Naiad >= 0.8x Triton's throughput and p99 <=
1.5x Triton's, on each protocol.

usage: python benchmarks/pipelines/run.py [--rounds 3] [--duration 8] [--grpc-requests 20000]
"""

from __future__ import annotations

import argparse
import json
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
from benchmarks.common.wrk import wrk

ENSEMBLE = "add_sub_mul"
BASELINE = "add_sub"
INPUT0 = np.array([1, 2, 3, 4], dtype=np.float32)
INPUT1 = np.array([4, 3, 2, 1], dtype=np.float32)
#: What each model must answer (both take INPUT0 and INPUT1).
EXPECTED = {
    ENSEMBLE: {"OUTPUT": (INPUT0 + INPUT1) * (INPUT0 - INPUT1)},
    BASELINE: {"OUTPUT0": INPUT0 + INPUT1, "OUTPUT1": INPUT0 - INPUT1},
}


@dataclass
class Measurement:
    rps: float
    p50_ms: float
    p99_ms: float


@dataclass
class Load:
    """What drives one model: the wrk script and the h2load body."""

    model: str
    script: Path
    body: Path


def repository(root: Path) -> Path:
    repo = root / "models"
    for name in ("add_sub", "mul", ENSEMBLE):
        shutil.copytree(ROOT / "examples" / "model_repository" / name, repo / name)
    return repo


def load(root: Path, model: str) -> Load:
    document = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": INPUT0.tolist()},
            {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": INPUT1.tolist()},
        ]
    }
    script = root / f"{model}.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f"wrk.body = '{json.dumps(document, separators=(',', ':'))}'\n"
    )
    request = pb.ModelInferRequest(model_name=model)
    for name, array in (("INPUT0", INPUT0), ("INPUT1", INPUT1)):
        request.inputs.add(name=name, datatype="FP32", shape=[4])
        request.raw_input_contents.append(array.tobytes())
    message = request.SerializeToString()
    body = root / f"{model}.grpc"
    body.write_bytes(b"\x00" + struct.pack(">I", len(message)) + message)
    return Load(model, script, body)


def check(server: Served, model: str) -> None:
    """The model answers correctly over both protocols (what the load generators cannot see)."""
    for module, url in ((httpclient, server.http_port), (grpcclient, server.grpc_port)):
        client = module.InferenceServerClient(f"127.0.0.1:{url}")
        inputs = [module.InferInput("INPUT0", [4], "FP32"), module.InferInput("INPUT1", [4], "FP32")]
        inputs[0].set_data_from_numpy(INPUT0)
        inputs[1].set_data_from_numpy(INPUT1)
        result = client.infer(model, inputs)
        for name, expected in EXPECTED[model].items():
            np.testing.assert_array_equal(result.as_numpy(name), expected)
        client.close()


def http_run(server: Served, work: Load, duration: int, connections: int) -> Measurement:
    url = f"{server.http_url}/v2/models/{work.model}/infer"
    figures = wrk(url, work.script, duration, connections)
    rps, p50, p99 = figures["rps"], figures["p50"], figures["p99"]
    return Measurement(rps, p50, p99)


def grpc_run(server: Served, work: Load, requests: int, connections: int, log: Path) -> Measurement:
    url = f"http://127.0.0.1:{server.grpc_port}/inference.GRPCInferenceService/ModelInfer"
    log.unlink(missing_ok=True)  # h2load appends to its log
    command = ["h2load", "-n", str(requests), "-c", str(connections), "-m", "1", "-d", str(work.body)]
    command += ["-H", "content-type: application/grpc", "-H", "te: trailers", "--log-file", str(log), url]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    rps = next(float(line.split()[3]) for line in out.splitlines() if line.startswith("finished in"))
    counts = next(line for line in out.splitlines() if line.startswith("requests:")).split()
    if int(counts[9]) or int(counts[11]):
        raise RuntimeError(f"{server.name}: h2load reports failed requests: {' '.join(counts)}")
    durations = sorted(int(line.split("\t")[2]) for line in log.read_text().splitlines() if line)
    p99 = durations[min(len(durations) - 1, int(len(durations) * 0.99))]
    return Measurement(rps, durations[len(durations) // 2] / 1000, p99 / 1000)


Key = tuple[str, str, str]  # model, protocol, server


def measure(server: Served, work: Load, protocol: str, args: argparse.Namespace, log: Path) -> Measurement:
    if protocol == "http":
        return http_run(server, work, args.duration, args.connections)
    return grpc_run(server, work, args.grpc_requests, args.connections, log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=8, help="seconds per wrk run")
    parser.add_argument("--grpc-requests", type=int, default=20000, help="requests per h2load run")
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args(argv)
    for tool in ("wrk", "h2load"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is missing (apt-get install -y wrk nghttp2-client)")
    results: dict[Key, list[Measurement]] = {}
    with tempfile.TemporaryDirectory(prefix="pipelines-bench-") as tmp:
        root = Path(tmp)
        repo = repository(root)
        loads = [load(root, ENSEMBLE), load(root, BASELINE)]
        started: list[Served] = []
        try:
            for server in (naiad(repo), triton(repo)):
                started.append(server.__enter__())
            for server in started:
                for work in loads:
                    check(server, work.model)
                    http_run(server, work, 2, args.connections)  # warm-up
                    grpc_run(server, work, 2000, args.connections, root / "warm.log")
            for round_ in range(args.rounds):
                for work in loads:
                    for protocol in ("http", "grpc"):
                        for server in started:
                            m = measure(server, work, protocol, args, root / "h2load.log")
                            results.setdefault((work.model, protocol, server.name), []).append(m)
                            print(
                                f"round {round_ + 1} {work.model:11} {protocol:4} {server.name:6} "
                                f"{m.rps:8.0f} req/s p50 {m.p50_ms:6.2f} ms p99 {m.p99_ms:6.2f} ms",
                                flush=True,
                            )
            for server in started:
                for work in loads:
                    check(server, work.model)
        finally:
            for server in started:
                server.__exit__(None, None, None)
    report(results, args)
    return 0


def report(results: dict[Key, list[Measurement]], args: argparse.Namespace) -> None:
    medians = {
        key: Measurement(
            statistics.median(r.rps for r in runs),
            statistics.median(r.p50_ms for r in runs),
            statistics.median(r.p99_ms for r in runs),
        )
        for key, runs in results.items()
    }
    print(f"\nmedians of {args.rounds} rounds, {args.connections} connections")
    print(f"{'model':11} {'protocol':8} {'server':7} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7}")
    for (model, protocol, name), m in sorted(medians.items()):
        print(f"{model:11} {protocol:8} {name:7} {m.rps:8.0f} {m.p50_ms:7.2f} {m.p99_ms:7.2f}")
    for protocol in ("http", "grpc"):
        ours, theirs = medians[(ENSEMBLE, protocol, "naiad")], medians[(ENSEMBLE, protocol, "triton")]
        kept = {
            name: medians[(ENSEMBLE, protocol, name)].rps / medians[(BASELINE, protocol, name)].rps
            for name in ("naiad", "triton")
        }
        print(
            f"{protocol}: {ENSEMBLE} throughput {ours.rps / theirs.rps:.2f}x Triton (target >= 0.8x), "
            f"p99 {ours.p99_ms / theirs.p99_ms:.2f}x Triton (target <= 1.5x); the ensemble keeps "
            f"{kept['naiad']:.2f} of naiad's {BASELINE} throughput, {kept['triton']:.2f} of Triton's"
        )


if __name__ == "__main__":
    sys.exit(main())
