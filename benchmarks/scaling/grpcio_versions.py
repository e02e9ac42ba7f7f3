"""Why ``pyproject.toml`` bounds grpcio: gRPC calls per core with the installed grpcio and with others.

grpcio's asyncio server costs most of a unary call on one core (``README.md``: a bare ``grpc.aio``
server answering a canned reply serves about 1.2-1.7x what Triton serves whole), so its version moves
Naiad's per-core gRPC figure more than most changes to our own code.  For each version this runs, pinned
to one core with h2load on another (16 connections, interleaved rounds, medians):

- **bare**: a ``grpc.aio`` server on uvloop whose ``ModelInfer`` returns a prebuilt ``ModelInferResponse``
  (grpcio's own floor: nothing of ours runs);
- **naiad**: ``naiad serve`` with the reference ``add_sub`` in the engine, as ``run.py`` (3) measures it.

The installed grpcio is the reference; any other version is installed once with ``pip install --target``
(the package index must be reachable) and put first on ``PYTHONPATH`` for both servers, so nothing else
changes between the columns.  Run it again when a new grpcio is released, before widening the bound.

usage: python benchmarks/scaling/grpcio_versions.py [--versions 1.85.3] [--rounds 3] [--calls 20000]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.references import ROOT, Served, free_port, naiad
from benchmarks.common.scratch import scratch
from benchmarks.scaling.run import h2load_calls, repository, taskset, uptime

PYTHON = ROOT / ".venv" / "bin" / "python"

#: The bare server: grpc.aio on uvloop, one generic handler, the answer serialized once.
BARE = textwrap.dedent(
    """
    import asyncio, sys
    import grpc, uvloop
    from tritonclient.grpc import service_pb2 as pb

    ANSWER = pb.ModelInferResponse(model_name="add_sub", model_version="1").SerializeToString()

    async def infer(request, context):
        return ANSWER

    async def main():
        server = grpc.aio.server()
        handlers = {"ModelInfer": grpc.unary_unary_rpc_method_handler(infer)}
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("inference.GRPCInferenceService", handlers),)
        )
        server.add_insecure_port(f"127.0.0.1:{sys.argv[1]}")
        await server.start()
        print("ready", grpc.__version__, flush=True)
        await server.wait_for_termination()

    uvloop.run(main())
    """
)


def install(version: str, into: Path) -> Path | None:
    """A folder holding grpcio ``version`` to put first on ``PYTHONPATH`` (None: the installed one)."""
    if version == importlib.metadata.version("grpcio"):
        return None
    target = into / f"grpcio-{version}"
    if not target.exists():
        subprocess.run(
            [
                str(PYTHON),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                str(target),
                f"grpcio=={version}",
            ],
            check=True,
        )
    return target


def _env(overlay: Path | None) -> list[str]:
    """``env`` arguments that give a command the overlay's grpcio and the settings Naiad's package sets."""
    variables = ["PYTHONUNBUFFERED=1"]
    if overlay is not None:
        variables.append(f"PYTHONPATH={overlay}")
    return ["env", *variables]


class _Bare:
    """The bare server on ``port``, pinned to ``core``, with ``overlay``'s grpcio."""

    def __init__(self, overlay: Path | None, core: str | None, script: Path) -> None:
        self.port = free_port()
        # grpcio reads its experiments when imported; Naiad sets them in its package's first module
        command = [
            *_env(overlay),
            "GRPC_EXPERIMENTS=-event_engine_listener,-event_engine_for_all_other_endpoints",
        ]
        self.command = taskset(core, [*command, str(PYTHON), str(script), str(self.port)])
        self.process: subprocess.Popen[str] | None = None

    def __enter__(self) -> _Bare:
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("ready"):
            raise RuntimeError(f"bare server did not start: {line!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.process is not None
        self.process.terminate()
        self.process.wait(10)


def h2load(port: int, body: Path, calls: int, core: str | None) -> float:
    """Calls per second of ``calls`` unary ``ModelInfer`` calls, after 3,000 warm-up calls."""
    h2load_calls(port, body, 3000, core)
    return h2load_calls(port, body, calls, core)


def add_sub_body(path: Path) -> Path:
    """One length-prefixed ``ModelInferRequest`` for ``add_sub`` (raw FP32 [4] inputs), as h2load sends it."""
    import numpy as np
    from tritonclient.grpc import service_pb2 as pb

    request = pb.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[4])
        request.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    data = request.SerializeToString()
    path.write_bytes(b"\x00" + len(data).to_bytes(4, "big") + data)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--versions", default="1.85.3", help="grpcio versions beside the installed one")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    installed = importlib.metadata.version("grpcio")
    versions = [installed, *(v for v in args.versions.split(",") if v and v != installed)]
    several = (os.cpu_count() or 1) >= 2
    core, load_core = ("1", "0") if several else (None, None)
    print(f"grpcio installed: {installed}  uptime: {uptime()}", flush=True)
    work = scratch("bench-grpcio-")
    script = work / "bare.py"
    script.write_text(BARE)
    body = add_sub_body(work / "add_sub.bin")
    overlays = {version: install(version, work) for version in versions}
    repo = repository(in_engine=True)
    rates: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for version in versions:
            overlay = overlays[version]
            with _Bare(overlay, core, script) as bare:
                rates.setdefault((version, "bare"), []).append(h2load(bare.port, body, args.calls, load_core))
            served: Served = naiad(repo)
            served.command = taskset(core, [*_env(overlay), *served.command])
            with served:
                time.sleep(1.0)
                rate = h2load(served.grpc_port, body, args.calls, load_core)
                rates.setdefault((version, "naiad"), []).append(rate)
    print("\n| grpcio | bare grpc.aio (calls/s) | vs installed | Naiad add_sub (calls/s) | vs installed |")
    print("|---|---:|---:|---:|---:|")
    base = {kind: statistics.median(rates[(installed, kind)]) for kind in ("bare", "naiad")}
    for version in versions:
        bare, served_rate = (statistics.median(rates[(version, kind)]) for kind in ("bare", "naiad"))
        print(
            f"| {version}{' (installed)' if version == installed else ''} | {bare:,.0f} | "
            f"{bare / base['bare']:.2f}x | {served_rate:,.0f} | {served_rate / base['naiad']:.2f}x |"
        )
    print(f"\nrounds: {args.rounds}, calls per round: {args.calls}; every figure a median")
    print(f"uptime after: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
