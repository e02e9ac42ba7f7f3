"""A BYTES tensor of millions of elements through a Python identity model, end to end: Naiad in one
process and with two frontend workers against Triton 2.51, side by side in one run.

This is NVIDIA's qa/L0_grpc ``GrpcTest.test_bytes_contents_many_elements_serialization`` as a
measurement: ten million one-byte ``bytes_contents`` elements over the raw gRPC stub (50 MiB each way),
and a second request of a million elements of different lengths.  With frontend workers a BYTES
tensor crosses the wire framing (``naiad.codecs.bytes_tensor``) four more times than in one process
(the worker writes the engine's input, the engine reads it, and back for the output), so what the
codec spends per element shows here, and nowhere in the fixed-size benchmarks.

    python benchmarks/scaling/many_strings.py [--rounds 1] [--elements 10485760]

Prints each server's seconds per request (median over rounds) and the ratio to Triton's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import textwrap
import time
from pathlib import Path

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.references import Served, naiad, triton
from benchmarks.common.scratch import scratch
from benchmarks.grpc_infer.run import IDENTITY_PY

CONFIG = """
name: "string_identity"
backend: "python"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] }]
instance_group [{ kind: KIND_CPU }]
"""

LIMIT = 512 * 1024 * 1024


def _repository() -> Path:
    root = scratch("bench-strings-")
    (root / "string_identity" / "1").mkdir(parents=True)
    (root / "string_identity" / "config.pbtxt").write_text(textwrap.dedent(CONFIG))
    (root / "string_identity" / "1" / "model.py").write_text(textwrap.dedent(IDENTITY_PY))
    return root


def _request(elements: list[bytes]) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="string_identity")
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = "INPUT0", "BYTES"
    tensor.shape.append(len(elements))
    tensor.contents.bytes_contents.extend(elements)
    request.outputs.add().name = "OUTPUT0"
    return request


def _seconds(served: Served, request: service_pb2.ModelInferRequest, expected_bytes: int) -> float:
    options = [("grpc.max_send_message_length", LIMIT), ("grpc.max_receive_message_length", LIMIT)]
    with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}", options=options) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        start = time.perf_counter()
        response = stub.ModelInfer(request, timeout=600)
        elapsed = time.perf_counter() - start
    got = len(response.raw_output_contents[0])
    if got != expected_bytes:
        raise RuntimeError(f"{served.name}: {got} output bytes, expected {expected_bytes}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--elements", type=int, default=10 * 1024 * 1024)
    args = parser.parse_args(argv)
    same = [b"A"] * args.elements
    varied = [b"A" * (i % 7) for i in range(args.elements // 10)]
    workloads = {
        f"{len(same):,} x 1 byte": (_request(same), 5 * len(same)),
        f"{len(varied):,} of 0-6 bytes": (_request(varied), 4 * len(varied) + sum(map(len, varied))),
    }
    repo = _repository()
    servers = {
        "Triton 2.51": lambda: triton(repo),
        "Naiad, one process": lambda: naiad(repo, "--frontend-workers=0"),
        "Naiad, 2 frontend workers": lambda: naiad(repo, "--frontend-workers=2"),
    }
    seconds: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for server, start in servers.items():
            with start() as served:
                for workload, (request, expected) in workloads.items():
                    seconds.setdefault((server, workload), []).append(_seconds(served, request, expected))
    print("| server | " + " | ".join(workloads) + " |")
    print("|---|" + "---:|" * len(workloads))
    for server in servers:
        cells = []
        for workload in workloads:
            value = statistics.median(seconds[(server, workload)])
            reference = statistics.median(seconds[("Triton 2.51", workload)])
            cells.append(f"{value:.2f} s ({reference / value:.2f}x Triton's speed)")
        print(f"| {server} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
