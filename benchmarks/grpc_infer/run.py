"""gRPC ModelInfer throughput: Naiad vs NVIDIA Triton vs Seldon MLServer, in one run.

Two workloads, both raw ``raw_input_contents`` requests driven by h2load over HTTP/2:

* ``add_sub``: two FP32[4] inputs, the Python-backend example model (request/response overhead);
* ``identity_large``: one FP32[1,3,224,224] tensor in and out (602,112 bytes each way; bandwidth).

h2load counts every HTTP 200 as a success, but gRPC reports failures in trailers with status 200, so
before each measurement the same request body is sent through a real gRPC channel and every answer
must carry status OK and the expected outputs.  Servers are measured in turns, several rounds, and the
medians are reported, because a small shared machine is noisy.

usage: python benchmarks/grpc_infer/run.py [--rounds 3] [--connections 16] [--only naiad,triton]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.references import free_port

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT.parent / "shared" / "reference"
LARGE_SHAPE = (1, 3, 224, 224)

IDENTITY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""
IDENTITY_CONFIG = """
backend: "python"
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] }]
instance_group [{ kind: KIND_CPU }]
"""
_MLSERVER_IDENTITY = """
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class Identity(MLModel):
    async def load(self) -> bool:
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        data = NumpyCodec.decode_input(payload.inputs[0])
        return InferenceResponse(model_name=self.name, outputs=[NumpyCodec.encode_output("OUTPUT0", data)])
"""


# ---- workloads --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str
    model: str
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    requests: int

    def message(self) -> bytes:
        request = pb.ModelInferRequest(model_name=self.model)
        for name, array in self.inputs.items():
            request.inputs.add(name=name, datatype="FP32", shape=array.shape)
            request.raw_input_contents.append(array.tobytes())
        return request.SerializeToString()

    def tensor_bytes(self) -> int:
        """Tensor bytes moved per request, in and out."""
        return sum(a.nbytes for a in self.inputs.values()) + sum(a.nbytes for a in self.expected.values())


def workloads(scale: float) -> list[Workload]:
    a = np.arange(4, dtype=np.float32)
    b = np.ones(4, dtype=np.float32)
    image = np.random.default_rng(0).random(LARGE_SHAPE, dtype=np.float32)
    return [
        Workload(
            "add_sub",
            "add_sub",
            {"INPUT0": a, "INPUT1": b},
            {"OUTPUT0": a + b, "OUTPUT1": a - b},
            int(20000 * scale),
        ),
        Workload(
            "identity_large", "identity_large", {"INPUT0": image}, {"OUTPUT0": image}, int(3000 * scale)
        ),
    ]


# ---- servers ----------------------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    command: list[str]
    grpc_port: int
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    def start(self, log: Path) -> None:
        self.process = subprocess.Popen(
            self.command,
            cwd=self.cwd,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            start_new_session=True,
        )

    def wait_ready(self, models: list[str], timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}") as channel:
            stub = pbg.GRPCInferenceServiceStub(channel)
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise RuntimeError(f"{self.name} exited with {self.process.returncode}")
                try:
                    if all(stub.ModelReady(pb.ModelReadyRequest(name=m), timeout=2).ready for m in models):
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.5)
        raise RuntimeError(f"{self.name} was not ready within {timeout}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def triton_repository(root: Path) -> Path:
    repo = root / "models"
    shutil.copytree(ROOT / "examples" / "model_repository" / "add_sub", repo / "add_sub")
    (repo / "identity_large" / "1").mkdir(parents=True)
    (repo / "identity_large" / "1" / "model.py").write_text(textwrap.dedent(IDENTITY_PY))
    (repo / "identity_large" / "config.pbtxt").write_text(textwrap.dedent(IDENTITY_CONFIG))
    return repo


def mlserver_folder(root: Path, http: int, grpc_port: int) -> Path:
    folder = root / "mlserver"
    shutil.copytree(REFERENCE / "mlserver" / "add_sub", folder / "add_sub")
    (folder / "identity_large").mkdir(parents=True)
    (folder / "identity_large" / "model.py").write_text(textwrap.dedent(_MLSERVER_IDENTITY))
    (folder / "identity_large" / "model-settings.json").write_text(
        json.dumps({"name": "identity_large", "implementation": "model.Identity"})
    )
    settings = {
        "http_port": http,
        "grpc_port": grpc_port,
        "metrics_port": free_port(),
        "parallel_workers": 0,
        "debug": False,
    }
    (folder / "settings.json").write_text(json.dumps(settings))
    return folder


def servers(root: Path, repo: Path) -> list[Server]:
    naiad_grpc, triton_grpc, mlserver_grpc = free_port(), free_port(), free_port()
    naiad = Server(
        "naiad",
        [
            sys.executable,
            "-m",
            "naiad",
            "serve",
            f"--model-repository={repo}",
            f"--grpc-port={naiad_grpc}",
            f"--http-port={free_port()}",
            f"--metrics-port={free_port()}",
            "--allow-metrics=false",
        ],
        naiad_grpc,
    )
    triton = Server(
        "triton",
        [
            "bash",
            str(REFERENCE / "triton.sh"),
            f"--model-repository={repo}",
            f"--grpc-port={triton_grpc}",
            f"--http-port={free_port()}",
            f"--metrics-port={free_port()}",
            "--allow-metrics=false",
        ],
        triton_grpc,
    )
    venv = Path(os.environ.get("NAIAD_REF_MLSERVER_VENV", Path.home() / ".cache/naiad-reference/mlserver"))
    folder = mlserver_folder(root, free_port(), mlserver_grpc)
    mlserver = Server("mlserver", [str(venv / "bin" / "mlserver"), "start", "."], mlserver_grpc, cwd=folder)
    return [naiad, triton, mlserver]


# ---- measuring --------------------------------------------------------------------------------------


def check_answers(server: Server, workload: Workload, count: int = 50) -> None:
    """Every answer must be gRPC status OK with the expected outputs (h2load cannot see either)."""
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=options) as channel:
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=lambda data: data,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        body = workload.message()
        for _ in range(count):
            response = call(body, timeout=30)
            outputs = {o.name: i for i, o in enumerate(response.outputs)}
            for name, expected in workload.expected.items():
                index = outputs[name]
                if response.raw_output_contents:
                    got = np.frombuffer(response.raw_output_contents[index], dtype=np.float32)
                else:  # MLServer answers in typed contents
                    got = np.array(response.outputs[index].contents.fp32_contents, dtype=np.float32)
                np.testing.assert_array_equal(got, expected.reshape(-1))


@dataclass
class Measurement:
    rps: float
    p50_ms: float
    p99_ms: float
    failed: int


def h2load_command(url: str, body: Path, requests: int, connections: int) -> list[str]:
    """h2load sending ``requests`` unary calls of ``body`` (one length-prefixed message) to ``url``."""
    return [
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
        url,
    ]


def h2load(
    server: Server, workload: Workload, body: Path, requests: int, connections: int, log: Path
) -> Measurement:
    url = f"http://127.0.0.1:{server.grpc_port}/inference.GRPCInferenceService/ModelInfer"
    log.unlink(missing_ok=True)  # h2load appends to its log
    out = subprocess.run(
        [*h2load_command(url, body, requests, connections), "--log-file", str(log)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = next(float(line.split()[3]) for line in out.splitlines() if line.startswith("finished in"))
    counts = next(line for line in out.splitlines() if line.startswith("requests:"))
    failed = int(counts.split()[9]) + int(counts.split()[11])  # failed, errored
    durations = sorted(int(line.split("\t")[2]) for line in log.read_text().splitlines() if line)
    return Measurement(
        rps,
        durations[len(durations) // 2] / 1000,
        durations[min(len(durations) - 1, int(len(durations) * 0.99))] / 1000,
        failed,
    )


def grpc_body(workload: Workload, path: Path) -> Path:
    message = workload.message()
    path.write_bytes(b"\x00" + struct.pack(">I", len(message)) + message)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the request counts")
    parser.add_argument("--only", default="naiad,triton,mlserver")
    args = parser.parse_args(argv)
    if shutil.which("h2load") is None:
        parser.error("h2load is missing: apt-get install -y nghttp2-client")
    wanted = args.only.split(",")
    with tempfile.TemporaryDirectory(prefix="grpc-bench-") as tmp:
        root = Path(tmp)
        repo = triton_repository(root)
        chosen = [s for s in servers(root, repo) if s.name in wanted]
        loads = workloads(args.scale)
        results: dict[tuple[str, str], list[Measurement]] = {}
        try:
            for server in chosen:
                server.start(root / f"{server.name}.log")
            for server in chosen:
                server.wait_ready([w.model for w in loads])
            for workload in loads:
                body = grpc_body(workload, root / f"{workload.name}.body")
                for server in chosen:
                    check_answers(server, workload)
                    h2load(
                        server,
                        workload,
                        body,
                        max(200, workload.requests // 10),
                        args.connections,
                        root / "warmup.log",
                    )
                for round_ in range(args.rounds):
                    for server in chosen:
                        m = h2load(
                            server, workload, body, workload.requests, args.connections, root / "h2load.log"
                        )
                        results.setdefault((workload.name, server.name), []).append(m)
                        print(
                            f"round {round_ + 1} {workload.name:15} {server.name:9} {m.rps:9.0f} req/s "
                            f"p50 {m.p50_ms:6.2f} ms p99 {m.p99_ms:6.2f} ms failed {m.failed}",
                            flush=True,
                        )
                    for server in chosen:
                        check_answers(server, workload, 5)
        finally:
            for server in chosen:
                server.stop()
        report(results, loads, [s.name for s in chosen], args.connections)
    return 0


def report(
    results: dict[tuple[str, str], list[Measurement]],
    loads: list[Workload],
    names: list[str],
    connections: int,
) -> None:
    print(f"\nmedians, {connections} connections, 1 stream each")
    print(f"{'workload':15} {'server':9} {'req/s':>9} {'MB/s':>8} {'p50 ms':>7} {'p99 ms':>7}  ratios")
    for workload in loads:
        medians = {name: statistics.median(m.rps for m in results[(workload.name, name)]) for name in names}
        for name in names:
            runs = results[(workload.name, name)]
            rps = medians[name]
            mbps = rps * workload.tensor_bytes() / 1e6
            ratios = "  ".join(
                f"{rps / medians[other]:.2f}x {other}" for other in names if other != name and medians[other]
            )
            p50 = statistics.median(m.p50_ms for m in runs)
            p99 = statistics.median(m.p99_ms for m in runs)
            print(f"{workload.name:15} {name:9} {rps:9.0f} {mbps:8.1f} {p50:7.2f} {p99:7.2f}  {ratios}")


if __name__ == "__main__":
    sys.exit(main())
