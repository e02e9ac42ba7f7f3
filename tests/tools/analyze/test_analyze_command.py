"""``naiad analyze`` end to end: it starts its own server, loads candidates by config override, ranks
them by what it measured and writes the winner's config; dynamic batching wins where it must (a Python
model with a fixed cost per execution); nothing over the latency budget wins."""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tests.support.models import write_model
from tests.support.server import ROOT

#: A fixed 10 ms per execution whatever the batch: the case dynamic batching exists for.
SLEEPY_PY = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.01)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""
SLEEPY_CONFIG = """
name: "sleepy"
backend: "python"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
"""
MLP_CONFIG = """
name: "mlp"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 512 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 512 ] }]
"""
FAST = ["-p", "400", "-r", "4", "-s", "30", "--instance-counts", "1", "--max-batch-sizes", "8"]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("analyze-repo")
    write_model(repo, "sleepy", SLEEPY_CONFIG, textwrap.dedent(SLEEPY_PY))
    spec = importlib.util.spec_from_file_location("build_examples", ROOT / "scripts" / "build_examples.py")
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    (repo / "mlp" / "1").mkdir(parents=True)
    builder.build_mlp(repo / "mlp" / "1" / "model.onnx")
    (repo / "mlp" / "config.pbtxt").write_text(textwrap.dedent(MLP_CONFIG))
    return repo


def analyze(repo: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "naiad", "analyze", "--model-repository", str(repo), "-o", str(out), *args],
        capture_output=True, text=True, timeout=240,
    )


def _said(done: subprocess.CompletedProcess[str], out: Path) -> str:
    """What the command printed, and the end of its server's log (why a load failed is there)."""
    log = out / "server.log"
    tail = log.read_text(errors="replace")[-4000:] if log.exists() else "(no server log)"
    return f"{done.stdout}{done.stderr}\n--- server.log ---\n{tail}"


def _candidates(out: Path) -> list[dict[str, str]]:
    with (out / "candidates.csv").open() as handle:
        return list(csv.DictReader(handle))


def _config(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def _files(repository: Path) -> dict[Path, bytes]:
    """The repository's files, but for bytecode caches (``__pycache__``: not part of a model, whoever
    writes one)."""
    return {p: p.read_bytes() for p in repository.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_batching_wins_for_the_mlp_and_the_python_model(repository: Path, tmp_path: Path) -> None:
    files_before = _files(repository)
    out = tmp_path / "out"
    done = analyze(repository, out, "mlp", "sleepy", "--concurrency", "8", "--latency-budget-ms", "2000", *FAST)
    assert done.returncode == 0, _said(done, out)
    rows = _candidates(out)
    for model in ("mlp", "sleepy"):
        ranked = [r for r in rows if r["Model"] == model]
        assert len(ranked) == 2  # quick search: unbatched, then its neighbour with dynamic batching
        best, other = ranked
        assert {best["Dynamic Batching"], other["Dynamic Batching"]} == {"True", "False"}, ranked
        assert float(best["Inferences/Second"]) >= float(other["Inferences/Second"])  # ranked by what it measured
        if model == "sleepy":  # 10 ms per execution whatever the batch: batching must win, by far
            assert best["Dynamic Batching"] == "True", ranked
            assert float(best["Inferences/Second"]) > 1.3 * float(other["Inferences/Second"])
        # (for the MLP the winner depends on the machine: two shared cores have measured either)
        assert float(best["p99 latency (ms)"]) <= 2000 and float(best["Peak RSS (MiB)"]) > 10
        config = _config(out / model / "config.pbtxt")  # the winner's config, whichever it is
        assert config.name == model and config.max_batch_size == 8
        assert config.HasField("dynamic_batching") == (best["Dynamic Batching"] == "True")
        assert config.instance_group[0].count == 1
        assert f"best config for {model}: {out / model / 'config.pbtxt'}" in done.stdout
    # the repository is untouched: candidates are load-time overrides
    assert _files(repository) == files_before
    with (out / "measurements.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == 4  # two candidates x one concurrency, per model
    report = (out / "report.html").read_text()
    assert report.count("<svg") == 4 and "throughput vs concurrency" in report
    assert "<script" not in report and "src=" not in report and "href=" not in report  # self-contained
    assert "Best: <b>1 inst, dyn batch max 8</b>" in report


def test_nothing_over_the_latency_budget_wins(repository: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    # every execution sleeps 10 ms: no candidate can answer within 2 ms
    done = analyze(repository, out, "sleepy", "--mode", "brute", "--concurrency", "1", "--latency-budget-ms", "2",
                   *FAST)
    assert done.returncode == 1, _said(done, out)
    assert "sleepy: no candidate met the constraints" in done.stdout
    assert not (out / "sleepy" / "config.pbtxt").exists()
    rows = _candidates(out)
    assert len(rows) == 2 and all(r["Feasible"] == "False" for r in rows)
    assert all(r["Reason"] == "p99 over 2 ms at every concurrency" for r in rows)
    assert "No candidate met the constraints" in (out / "report.html").read_text()
