"""One MLP as TorchScript and as ONNX through Naiad over HTTP, against torch in process (the limit).

The network is 512 -> 2048 -> 2048 -> 512, FP32, ReLU between layers, built here with fixed seeds; it
is scripted for the PyTorch backend and exported with ``torch.onnx.export`` for the ONNX Runtime
backend, and both are served by one Naiad with the same config (``max_batch_size`` 64, ``dynamic_batching
{}``, one CPU instance).  wrk drives each model with binary-tensor requests (``--batch`` rows each) from
``--connections`` concurrent connections for several interleaved rounds; torch and ONNX Runtime are
also timed in this process, one request after another with the same rows, which is what the server
could at best deliver without batching.  Medians of the rounds are printed, with the ratios.

``--threads N`` sets both frameworks' intra-op thread pools to N, in the server (``INTRA_OP_THREAD_COUNT``,
``intra_op_thread_count``) and in process; 0 keeps their defaults (one thread per core).

usage: python benchmarks/torch_vs_onnx/run.py [--duration 8] [--rounds 3] [--connections 8] [--batch 1]
                                              [--threads 0]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import textwrap
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
import tritonclient.http as httpclient
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.references import naiad
from benchmarks.common.scratch import scratch
from benchmarks.common.wrk import wrk

SIZES = (512, 2048, 2048, 512)
CONFIG = """
    platform: "{platform}"
    max_batch_size: 64
    input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {width_in} ] }} ]
    output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {width_out} ] }} ]
    dynamic_batching {{ }}
    instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""
#: Each backend's name for its intra-op thread count parameter.
THREADS_PARAMETER = {"pytorch_libtorch": "INTRA_OP_THREAD_COUNT", "onnxruntime_onnx": "intra_op_thread_count"}

Figures = dict[str, float]


def network() -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for index, (width_in, width_out) in enumerate(itertools.pairwise(SIZES)):
        layers.append(nn.Linear(width_in, width_out))
        if index < len(SIZES) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).eval()


def build_repository(module: nn.Module, root: Path, threads: int) -> None:
    """``mlp_torch`` (TorchScript) and ``mlp_onnx`` (its ONNX export) under ``root``."""
    for name, platform in (("mlp_torch", "pytorch_libtorch"), ("mlp_onnx", "onnxruntime_onnx")):
        (root / name / "1").mkdir(parents=True)
        text = textwrap.dedent(CONFIG.format(platform=platform, width_in=SIZES[0], width_out=SIZES[-1]))
        if threads > 0:
            key = THREADS_PARAMETER[platform]
            text += f'parameters {{ key: "{key}" value {{ string_value: "{threads}" }} }}\n'
        (root / name / "config.pbtxt").write_text(text)
    with warnings.catch_warnings():  # TorchScript and the TorchScript-based ONNX exporter are deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.script(module).save(str(root / "mlp_torch" / "1" / "model.pt"))
        torch.onnx.export(
            module,
            (torch.zeros(1, SIZES[0]),),
            str(root / "mlp_onnx" / "1" / "model.onnx"),
            input_names=["INPUT__0"],
            output_names=["OUTPUT__0"],
            dynamic_axes={"INPUT__0": {0: "batch"}, "OUTPUT__0": {0: "batch"}},
            dynamo=False,
        )


def wrk_script(rows: np.ndarray[Any, Any], folder: Path) -> Path:
    """A wrk script posting ``rows`` as one binary-tensor inference request."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT__0",
                    "datatype": "FP32",
                    "shape": list(rows.shape),
                    "parameters": {"binary_data_size": rows.nbytes},
                }
            ],
            "outputs": [{"name": "OUTPUT__0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = folder / "body.bin"
    body.write_bytes(header + rows.tobytes())
    script = folder / "infer.lua"
    script.write_text(
        f'local f = assert(io.open("{body}", "rb"))\n'
        'wrk.method = "POST"\nwrk.body = f:read("*a")\nf:close()\n'
        'wrk.headers["Content-Type"] = "application/octet-stream"\n'
        f'wrk.headers["Inference-Header-Content-Length"] = "{len(header)}"\n'
    )
    return script


def in_process(run: Callable[[], object], duration: float) -> Figures:
    """Calls of ``run`` back to back for ``duration`` seconds (after a warm-up)."""
    for _ in range(20):
        run()
    latencies: list[float] = []
    deadline = time.perf_counter() + duration
    while (start := time.perf_counter()) < deadline:
        run()
        latencies.append(time.perf_counter() - start)
    cuts = statistics.quantiles(latencies, n=100)
    return {"rps": len(latencies) / sum(latencies), "p50": cuts[49] * 1e3, "p99": cuts[98] * 1e3}


def check_outputs(url: str, module: nn.Module, rows: np.ndarray[Any, Any]) -> None:
    """Both served models must answer what eager torch computes before anything is timed."""
    with torch.inference_mode():
        expected = module(torch.from_numpy(rows)).numpy()
    client = httpclient.InferenceServerClient(url.removeprefix("http://"))
    try:
        for model in ("mlp_torch", "mlp_onnx"):
            tensor = httpclient.InferInput("INPUT__0", list(rows.shape), "FP32")
            tensor.set_data_from_numpy(rows)
            got = client.infer(model, [tensor]).as_numpy("OUTPUT__0")
            np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4, err_msg=model)
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1, help="rows per request")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: framework default)")
    args = parser.parse_args()

    module = network()
    rows = np.random.default_rng(0).standard_normal((args.batch, SIZES[0]), dtype=np.float32)
    folder = scratch("bench-torch-onnx-")
    build_repository(module, folder / "repo", args.threads)
    script = wrk_script(rows, folder)
    options = ort.SessionOptions()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
        options.intra_op_num_threads = args.threads
    scripted = torch.jit.load(str(folder / "repo" / "mlp_torch" / "1" / "model.pt"))
    session = ort.InferenceSession(str(folder / "repo" / "mlp_onnx" / "1" / "model.onnx"), options)
    tensor = torch.from_numpy(rows)

    def torch_call() -> object:
        with torch.inference_mode():
            return scripted(tensor)

    def onnx_call() -> object:
        return session.run(None, {"INPUT__0": rows})

    results: dict[str, list[Figures]] = {}
    with naiad(folder / "repo") as server:
        check_outputs(server.http_url, module, rows)
        urls = {name: f"{server.http_url}/v2/models/{name}/infer" for name in ("mlp_torch", "mlp_onnx")}
        for url in urls.values():  # warm-up
            wrk(url, script, 2, args.connections)
        for _ in range(args.rounds):
            for name, url in urls.items():
                results.setdefault(f"naiad {name}", []).append(
                    wrk(url, script, args.duration, args.connections)
                )
            results.setdefault("torch in-process", []).append(in_process(torch_call, args.duration))
            results.setdefault("onnxruntime in-process", []).append(in_process(onnx_call, args.duration))

    med = {
        name: {k: statistics.median(r[k] for r in runs) for k in ("rps", "p50", "p99")}
        for name, runs in results.items()
    }
    print(
        f"MLP {'->'.join(map(str, SIZES))} FP32, {args.batch} row(s) per request; server: HTTP binary, "
        f"wrk -t1 -c{args.connections}; in-process: one call after another; intra-op threads: "
        f"{args.threads or 'default'}; {args.rounds} x {args.duration}s (medians)"
    )
    print(f"{'':26} {'inferences/s':>13} {'p50 ms':>8} {'p99 ms':>8}")
    for name, m in med.items():
        print(f"{name:26} {m['rps'] * args.batch:13.0f} {m['p50']:8.2f} {m['p99']:8.2f}")
    served_torch, served_onnx = med["naiad mlp_torch"]["rps"], med["naiad mlp_onnx"]["rps"]
    print(f"naiad torch / naiad onnx             = {served_torch / served_onnx:.2f}x")
    print(f"naiad torch / torch in-process       = {served_torch / med['torch in-process']['rps']:.2f}x")
    print(f"naiad onnx  / onnxruntime in-process = {served_onnx / med['onnxruntime in-process']['rps']:.2f}x")


if __name__ == "__main__":
    main()
