"""A stateful sequence model at concurrency 1: a model process against the model in the engine.

One ``tritonclient`` gRPC client calls one sequence of ``stateful`` (a Python model with implicit state:
the sequence batcher carries ``STATE_OUT`` of one request to ``STATE_IN`` of the next, see
``tests/pipelines/models.py``) one request at a time, against ``naiad serve`` with the model in a model
process (the default) and in the engine (``NAIAD_INSTANCE_PROCESSES=false``, the reference), in
interleaved rounds: the client's p50, the server tree's CPU per request, and whether the running total
the model returns matches the calls made (the state crossed every request).

usage: python benchmarks/isolation/sequence_c1.py [--seconds 4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import tritonclient.grpc as grpcclient

from benchmarks.common.references import Served, naiad
from benchmarks.common.scratch import scratch
from benchmarks.isolation.run import IN_THE_ENGINE, cpu_seconds
from benchmarks.scaling.run import uptime
from tests.pipelines.models import STATEFUL, STATEFUL_PY


def repository(in_engine: bool) -> Path:
    root = scratch("bench-sequence-")
    (root / "stateful" / "1").mkdir(parents=True)
    (root / "stateful" / "config.pbtxt").write_text(STATEFUL + (IN_THE_ENGINE if in_engine else ""))
    (root / "stateful" / "1" / "model.py").write_text(STATEFUL_PY)
    return root


def calls(served: Served, seconds: float) -> tuple[float, float, bool]:
    """(p50 us, server CPU us per request, the running total right) over ``seconds`` of calls."""
    assert served.process is not None
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{served.grpc_port}")
    one = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    one.set_data_from_numpy(np.ones((1, 1), np.int32))
    try:
        client.infer("stateful", [one], sequence_id=7, sequence_start=True)
        made = 1
        for _ in range(300):  # warm-up
            client.infer("stateful", [one], sequence_id=7)
        made += 300
        latencies = []
        before = cpu_seconds(served.process.pid)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            answer = client.infer("stateful", [one], sequence_id=7)
            latencies.append(time.perf_counter() - started)
        spent = cpu_seconds(served.process.pid) - before
        made += len(latencies)
        output = answer.as_numpy("OUTPUT")
        assert output is not None
        total = int(output.reshape(-1)[0])
    finally:
        client.close()
    return statistics.median(latencies) * 1e6, spent / len(latencies) * 1e6, total == made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    print(f"uptime: {uptime()}")
    repositories = {"in the engine": repository(True), "model process": repository(False)}
    rows: dict[str, list[tuple[float, float, bool]]] = {label: [] for label in repositories}
    for _ in range(args.rounds):
        for label, repo in repositories.items():
            with naiad(repo) as served:
                rows[label].append(calls(served, args.seconds))
    engine = statistics.median(row[0] for row in rows["in the engine"])
    print("| model | gRPC c=1 p50 (vs the engine) | server CPU per request | state right |")
    print("|---|---:|---:|---|")
    for label, measured in rows.items():
        p50 = statistics.median(row[0] for row in measured)
        cpu = statistics.median(row[1] for row in measured)
        right = all(row[2] for row in measured)
        print(f"| {label} | {p50:.0f} us ({p50 - engine:+.0f}) | {cpu:.0f} us | {'yes' if right else 'NO'} |")
    print(f"uptime after: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
