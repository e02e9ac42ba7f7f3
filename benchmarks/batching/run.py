"""What the scheduler buys: dynamic batching on an ONNX MLP, and instance processes for Python models.

Part 1, ONNX MLP 512->2048->2048->512 FP32 (``build_mlp`` of ``scripts/build_examples.py``), 64
concurrent clients sending one row each over binary HTTP (wrk, keep-alive):

* (a) Naiad with ``dynamic_batching`` (max_batch_size 32),
* (b) Naiad without it (one ``session.run`` per request),
* (c) ONNX Runtime in this process, batch 32 in a tight loop: the limit for this machine, with ORT's
  default thread pool and (c') with one intra-op thread,
* (d) the same requests to an ONNX ``Identity`` of the same shapes on Naiad: what the HTTP path and
  the load generator alone cost per request.  (a) shares the two cores between that cost and the
  MLP's arithmetic, so ``1 / (1/(d) + 1/(c))`` bounds (a) on this machine, and is printed with it.

The served model uses ``intra_op_thread_count: 1``: on a 2-core machine that also runs the load
generator and the server's event loop, ORT's default pool (one spinning thread per core) fights them
for the CPU and halves throughput.

Part 2, Python backend over HTTP/JSON (16 clients): ``add_sub`` and a CPU-heavy variant (a pure-Python
loop per request), with ``instance_group [{count: 2}]`` (two worker processes) vs ``count: 1`` (in
the server process).

Rounds are interleaved so that machine noise spreads over all configurations; medians are printed.
The load generator (wrk) runs on the same machine and takes CPU from the server.

usage: python benchmarks/batching/run.py [--duration 8] [--rounds 3] [--skip-python] [--skip-mlp]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common.wrk import wrk  # noqa: E402
from tests.support.server import ServerProcess  # noqa: E402

BATCH = 32
CLIENTS = 64

MLP_CONFIG = """
name: "mlp"
platform: "onnxruntime_onnx"
max_batch_size: 32
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 512 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 512 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
"""
DYNAMIC_BATCHING = "dynamic_batching { max_queue_delay_microseconds: 2000 }\n"

HEAVY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            total = 0
            for i in range(20000):  # about a millisecond of pure-Python work, holding the GIL
                total += i * i
            out0 = pb_utils.Tensor("OUTPUT0", (in_0 + in_1).astype("float32"))
            out1 = pb_utils.Tensor("OUTPUT1", (in_0 - in_1).astype("float32"))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out0, out1]))
        return responses
"""

ADD_SUB_JSON = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
    ]
}


def _build_examples() -> object:
    spec = importlib.util.spec_from_file_location("build_examples", ROOT / "scripts" / "build_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lua(body: bytes, headers: dict[str, str], folder: Path) -> Path:
    """A wrk script posting ``body`` (binary-safe: read from a file) with ``headers``."""
    body_file = folder / f"body-{len(list(folder.iterdir()))}.bin"
    body_file.write_bytes(body)
    script = body_file.with_suffix(".lua")
    lines = [
        'wrk.method = "POST"',
        f'local f = io.open("{body_file}", "rb")',
        "wrk.body = f:read('*a')",
        "f:close()",
    ]
    lines += [f'wrk.headers["{key}"] = "{value}"' for key, value in headers.items()]
    script.write_text("\n".join(lines) + "\n")
    return script


def ort_in_process(model: Path, duration: int, threads: int = 0) -> dict[str, float]:
    """(c): ``session.run`` at batch 32 in a tight loop (``threads`` 0: ORT's default pool)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    feed = {"INPUT0": np.random.default_rng(0).standard_normal((BATCH, 512), dtype=np.float32)}
    for _ in range(5):
        session.run(None, feed)
    latencies: list[float] = []
    end = time.perf_counter() + duration
    while (start := time.perf_counter()) < end:
        session.run(None, feed)
        latencies.append(time.perf_counter() - start)
    runs = len(latencies)
    latencies.sort()
    return {
        "rps": runs * BATCH / sum(latencies),
        "p50": latencies[runs // 2] * 1e3,
        "p99": latencies[min(runs - 1, runs * 99 // 100)] * 1e3,
    }


def _write(repo: Path, name: str, config: str, files: dict[str, str | bytes]) -> None:
    version = repo / name / "1"
    version.mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(textwrap.dedent(config))
    for filename, content in files.items():
        path = version / filename
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content))


def _mlp_body() -> tuple[bytes, dict[str, str]]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [1, 512],
                    "parameters": {"binary_data_size": 2048},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    data = np.random.default_rng(1).standard_normal((1, 512), dtype=np.float32).tobytes()
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }
    return header + data, headers


def _identity() -> bytes:
    """An ONNX ``Identity`` with the MLP's input and output: the same requests, no arithmetic."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", 512])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", 512])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


Runner = Callable[[], dict[str, float]]


def _rounds(configs: dict[str, Runner], rounds: int) -> dict[str, dict[str, float]]:
    results: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    for _ in range(rounds):
        for name, run in configs.items():
            results[name].append(run())
    return {
        name: {key: statistics.median(r[key] for r in runs) for key in ("rps", "p50", "p99")}
        for name, runs in results.items()
    }


def _table(title: str, medians: dict[str, dict[str, float]]) -> None:
    print(title)
    print(f"  {'configuration':34} {'infer/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for name, m in medians.items():
        print(f"  {name:34} {m['rps']:9.0f} {m['p50']:8.2f} {m['p99']:8.2f}")


def mlp(work: Path, duration: int, rounds: int) -> None:
    onnx_file = work / "mlp.onnx"
    _build_examples().build_mlp(onnx_file)  # type: ignore[attr-defined]
    model = onnx_file.read_bytes()
    batched, unbatched = work / "batched", work / "unbatched"
    _write(batched, "mlp", MLP_CONFIG + DYNAMIC_BATCHING, {"model.onnx": model})
    _write(unbatched, "mlp", MLP_CONFIG, {"model.onnx": model})
    _write(unbatched, "identity", MLP_CONFIG.replace('"mlp"', '"identity"'), {"model.onnx": _identity()})
    body, headers = _mlp_body()
    script = _lua(body, headers, work)
    with ServerProcess([batched]) as a, ServerProcess([unbatched]) as b:
        url_a = f"http://{a.http_url}/v2/models/mlp/infer"
        url_b = f"http://{b.http_url}/v2/models/mlp/infer"
        url_d = f"http://{b.http_url}/v2/models/identity/infer"
        for url in (url_a, url_b, url_d):  # warm-up
            wrk(url, script, 2, CLIENTS)
        medians = _rounds(
            {
                "(a) naiad, dynamic batching": lambda: wrk(url_a, script, duration, CLIENTS),
                "(b) naiad, no batching": lambda: wrk(url_b, script, duration, CLIENTS),
                "(c) onnxruntime in-process, b=32": lambda: ort_in_process(onnx_file, duration),
                "(c') same, 1 intra-op thread": lambda: ort_in_process(onnx_file, duration, 1),
                "(d) naiad, identity (HTTP path only)": lambda: wrk(url_d, script, duration, CLIENTS),
            },
            rounds,
        )
    _table(
        f"ONNX MLP 512-2048-2048-512 FP32, {CLIENTS} clients, binary HTTP ({rounds} x {duration}s, medians)",
        medians,
    )
    a_rps, b_rps, c_rps, c1_rps, d_rps = (m["rps"] for m in medians.values())
    best_c = max(c_rps, c1_rps)
    bound = 1 / (1 / d_rps + 1 / best_c)
    print(f"  (a)/(b) = {a_rps / b_rps:.2f} (target >= 3)   (a)/(c) = {a_rps / best_c:.2f} (target >= 0.8)")
    print(
        f"  bound on (a) here, 1/(1/(d) + 1/(c)) = {bound:.0f} infer/s = {bound / best_c:.2f} x (c); "
        f"(a) reaches {a_rps / bound:.2f} of it"
    )


def python_instances(work: Path, duration: int, rounds: int) -> None:
    add_sub = (ROOT / "examples" / "model_repository" / "add_sub" / "config.pbtxt").read_text()
    add_sub_py = (ROOT / "examples" / "model_repository" / "add_sub" / "1" / "model.py").read_text()
    repos = {}
    for count in (1, 2):
        repo = repos[count] = work / f"python-{count}"
        group = f"instance_group [{{ kind: KIND_CPU count: {count} }}]"
        config = add_sub.replace("instance_group [{ kind: KIND_CPU }]", group)
        _write(repo, "add_sub", config, {"model.py": add_sub_py})
        _write(repo, "heavy", config.replace('name: "add_sub"', 'name: "heavy"'), {"model.py": HEAVY_PY})
    script = _lua(json.dumps(ADD_SUB_JSON).encode(), {"Content-Type": "application/json"}, work)
    with ServerProcess([repos[1]]) as one, ServerProcess([repos[2]]) as two:
        configs: dict[str, Runner] = {}
        for model in ("add_sub", "heavy"):
            for count, server in ((1, one), (2, two)):
                url = f"http://{server.http_url}/v2/models/{model}/infer"
                wrk(url, script, 2, 16)
                where = "in process" if count == 1 else "2 worker processes"
                configs[f"{model}, count {count} ({where})"] = lambda url=url: wrk(url, script, duration, 16)
        medians = _rounds(configs, rounds)
    _table(f"Python backend, 16 clients, HTTP/JSON ({rounds} x {duration}s, medians)", medians)
    rates = [m["rps"] for m in medians.values()]
    add_sub_gain, heavy_gain = rates[1] / rates[0], rates[3] / rates[2]
    print(f"  add_sub count 2 / count 1 = {add_sub_gain:.2f}   heavy count 2 / count 1 = {heavy_gain:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-mlp", action="store_true")
    parser.add_argument("--skip-python", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="naiad-bench-batching-") as folder:
        work = Path(folder)
        if not args.skip_mlp:
            mlp(work, args.duration, args.rounds)
        if not args.skip_python:
            python_instances(work, args.duration, args.rounds)


if __name__ == "__main__":
    main()
