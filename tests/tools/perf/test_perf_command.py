"""``naiad perf`` against a real ``naiad serve``: report, CSV, checks of every answer, gRPC, shared memory,
decoupled streaming and sequences."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests.support.models import write_identity, write_model
from tests.support.server import ServerProcess

#: perf_analyzer's CSV header (report_writer.cc) for a model without response cache, not decoupled.
CSV_HEADER = ["Concurrency", "Inferences/Second", "Client Send", "Network+Server Send/Recv", "Server Queue",
              "Server Compute Input", "Server Compute Infer", "Server Compute Output", "Client Recv",
              "p50 latency", "p90 latency", "p95 latency", "p99 latency"]
FAST = ["-p", "200", "-r", "3", "-s", "1000", "--workers", "1"]


def perf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "naiad", "perf", *args], capture_output=True, text=True,
                          timeout=120)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def _successes(server: ServerProcess, model: str) -> int:
    with httpclient.InferenceServerClient(server.http_url) as client:
        stats = client.get_inference_statistics(model)["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"])


def test_http_concurrency_range_report_and_csv(example_server: ServerProcess, tmp_path: Path) -> None:
    before = _successes(example_server, "add_sub")
    out = tmp_path / "results.csv"
    done = perf("-m", "add_sub", "-u", example_server.http_url, "--concurrency-range", "1:3:2", "-f", str(out), *FAST)
    assert done.returncode == 0, done.stderr + done.stdout
    text = done.stdout
    assert "*** Measurement Settings ***" in text and "  Batch size: 1" in text
    assert "Request concurrency: 1" in text and "Request concurrency: 3" in text
    assert "Avg HTTP time:" in text and "Avg request latency:" in text and "compute infer" in text
    assert "Inferences/Second vs. Client Average Batch Latency" in text
    with out.open() as handle:
        assert next(csv.reader(handle)) == CSV_HEADER
    rows = _rows(out)
    assert sorted(int(r["Concurrency"]) for r in rows) == [1, 3]
    assert all(float(r["Inferences/Second"]) > 0 and int(r["p99 latency"]) >= int(r["p50 latency"]) > 0 for r in rows)
    after = _successes(example_server, "add_sub")
    counted = sum(int(line.split(":")[1]) for line in text.splitlines() if line.startswith("    Request count:"))
    assert after - before >= counted > 0  # the server saw at least every request the client counted


def test_grpc_shared_memory_shape_verbose_csv(tool_server: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "grpc.csv"
    done = perf("-m", "ident", "-i", "grpc", "-u", tool_server.grpc_url, "-b", "2", "--shape", "INPUT0:16",
                "--shared-memory", "system", "--percentile", "95", "-f", str(out), "--verbose-csv", *FAST)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Avg gRPC time:" in done.stdout and "Stabilizing using p95" in done.stdout
    assert "Inferences/Second vs. Client p95 Batch Latency" in done.stdout
    with out.open() as handle:
        header = next(csv.reader(handle))
    assert header == [*CSV_HEADER, "request/response", "response wait"]  # no "Avg latency" with --percentile
    [row] = _rows(out)
    assert float(row["Inferences/Second"]) > 0
    # the regions were unregistered at the end
    with httpclient.InferenceServerClient(tool_server.http_url) as client:
        status = client.get_system_shared_memory_status()
    assert not [r for r in status if str(r.get("name", "")).startswith("naiad_perf_")]


def test_decoupled_streaming_counts_responses(example_server: ServerProcess, tmp_path: Path) -> None:
    data = tmp_path / "three.json"
    data.write_text(json.dumps({"data": [{"IN": [3]}]}))
    out = tmp_path / "stream.csv"
    done = perf("-m", "square_int32", "-i", "grpc", "-u", example_server.grpc_url, "--streaming",
                "--input-data", str(data), "-f", str(out), *FAST)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Detected decoupled model" in done.stdout and "Response Throughput:" in done.stdout
    [row] = _rows(out)
    assert "Response Throughput" in row
    ratio = float(row["Response Throughput"]) / float(row["Inferences/Second"])
    assert ratio == pytest.approx(3, rel=0.05)  # three responses to each request


def test_decoupled_model_needs_grpc_streaming(example_server: ServerProcess) -> None:
    done = perf("-m", "square_int32", "-u", example_server.http_url, *FAST)
    assert done.returncode == 3
    assert "model 'square_int32' is decoupled: measure it with -i grpc --streaming" in done.stderr
    done = perf("-m", "add_sub", "-u", example_server.http_url, "--streaming", *FAST)
    assert done.returncode == 3 and "Streaming is only allowed with gRPC protocol." in done.stderr


def test_unknown_model_and_bad_flags(example_server: ServerProcess) -> None:
    done = perf("-m", "nope", "-u", example_server.http_url)
    assert done.returncode == 3 and "cannot read model 'nope'" in done.stderr
    done = perf("-m", "add_sub", "--concurrency-range", "1:x")
    assert done.returncode == 2 and "--concurrency-range 1:x: expected start[:end[:step]]" in done.stderr


FLAKY_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x[0] % 2:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("odd input")))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""

#: Fails unless every request of a correlation ID arrives between a START and an END, in order.
SEQUENCE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.open = set()

    def execute(self, requests):
        responses = []
        for request in requests:
            start = int(pb_utils.get_input_tensor_by_name(request, "START").as_numpy()[0])
            end = int(pb_utils.get_input_tensor_by_name(request, "END").as_numpy()[0])
            corrid = int(pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy()[0])
            if start:
                self.open.add(corrid)
            if corrid not in self.open:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{corrid} not started")))
                continue
            if end:
                self.open.discard(corrid)
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", x)]))
        return responses
"""
SEQUENCE_CONFIG = """
name: "seq"
backend: "python"
max_batch_size: 0
sequence_batching {
  control_input [
    { name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }] },
    { name: "END" control [{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }] },
    { name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }] }
  ]
}
input [{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }]
instance_group [{ kind: KIND_CPU }]
"""


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("perf-repo")
    write_model(repo, "flaky", """
    name: "flaky"
    backend: "python"
    input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }]
    output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }]
    """, FLAKY_PY)
    write_model(repo, "seq", SEQUENCE_CONFIG, SEQUENCE_PY)
    write_identity(repo, "ident", "TYPE_FP32", max_batch_size=8)
    with ServerProcess([repo], ["--allow-client-shm=true"]) as server:
        yield server


def test_failed_requests_are_counted_apart(tool_server: ServerProcess, tmp_path: Path) -> None:
    data = tmp_path / "mixed.json"
    data.write_text(json.dumps({"data": [{"INPUT0": [1]}, {"INPUT0": [2]}]}))
    done = perf("-m", "flaky", "-u", tool_server.http_url, "--input-data", str(data), *FAST)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    ok = int(next(line for line in lines if line.startswith("    Request count:")).split(":")[1])
    failed = int(next(line for line in lines if line.startswith("    Error count:")).split(":")[1])
    assert ok > 0 and failed > 0 and abs(ok - failed) <= 0.1 * (ok + failed)  # half the inputs fail
    assert "x HTTP 400: odd input" in done.stdout or "x HTTP 500: odd input" in done.stdout


@pytest.mark.parametrize(("protocol", "client"), [("http", "auto"), ("grpc", "auto"), ("grpc", "grpcio")])
def test_sequences_keep_their_correlation_ids(tool_server: ServerProcess, protocol: str, client: str) -> None:
    url = tool_server.grpc_url if protocol == "grpc" else tool_server.http_url
    done = perf("-m", "seq", "-i", protocol, "-u", url, "--concurrency-range", "4", "--sequence-length", "5",
                "--grpc-client", client, *FAST[:-1], "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Error count" not in done.stdout
    count_line = next(line for line in done.stdout.splitlines() if "Sequence count:" in line)
    assert int(count_line.split(":")[1].split()[0]) > 0


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_request_rate_range(example_server: ServerProcess, tmp_path: Path, protocol: str) -> None:
    url = example_server.grpc_url if protocol == "grpc" else example_server.http_url
    out = tmp_path / "rate.csv"
    done = perf("-m", "add_sub", "-i", protocol, "-u", url, "--request-rate-range", "40:80:40", "-f", str(out),
                "-p", "400", *FAST[2:])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Request Rate: 40" in done.stdout and "Using uniform distribution on request generation" in done.stdout
    rows = _rows(out)
    assert sorted(float(r["Request Rate"]) for r in rows) == [40.0, 80.0]
    for row in rows:  # the rate is kept, not exceeded
        assert float(row["Inferences/Second"]) == pytest.approx(float(row["Request Rate"]), rel=0.25)


def test_grpc_request_over_one_frame_goes_through_grpcio(example_server: ServerProcess) -> None:
    # image_classifier takes FP32 [3,224,224]: 602 KB, more than the bare HTTP/2 client sends
    done = perf("-m", "image_classifier", "-i", "grpc", "-u", example_server.grpc_url, *FAST)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Error count" not in done.stdout and "Throughput:" in done.stdout
