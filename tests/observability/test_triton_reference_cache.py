"""Metrics side by side with NVIDIA's Triton 2.51 with the response cache and latency summaries on.

Both servers get ``--cache-config local,size=1048576 --metrics-config summary_latencies=true`` and the
same batch-4 requests (HTTP and gRPC) to a batching model with the cache, a non-batching model and an
ensemble over the first; then every ``nv_*`` family Triton exposes must exist here with its help text
and type, and every count (not durations, sums or quantiles) must be equal.  Skipped where the
reference Triton is not installed (see :mod:`tests.observability.test_triton_reference`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.observability.conftest import samples
from tests.observability.test_triton_reference import pytestmark  # noqa: F401
from tests.server.test_fidelity import _write_repository
from tests.support.http import RawClient
from tests.support.reference import reference_triton
from tests.support.server import ServerProcess

ARGS = ["--cache-config=local,size=1048576", "--metrics-config=summary_latencies=true", "--metrics-interval-ms=100"]
#: Values that are times, or depend on them, on how each server sizes a cache entry, on the machine, or
#: on a pool Naiad does not have (Triton reports its configured 256 MiB pinned pool even without CUDA).
_NOT_COMPARED = ("_duration", "_sum", "nv_cache_util", "nv_cpu_", "nv_gpu_", "nv_energy_",
                 "nv_pinned_memory_pool_total_bytes")  # fmt: skip


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_repository(tmp_path_factory.mktemp("reference-cache-repo"))


@pytest.fixture(scope="module")
def triton(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    with reference_triton(repo, tmp_path_factory.mktemp("triton") / "triton.log", ARGS) as reference:
        yield reference.http, reference.grpc, reference.metrics


@pytest.fixture(scope="module")
def naiad(repo: Path) -> Iterator[tuple[str, str, str]]:
    with ServerProcess([repo], ARGS) as server:
        yield server.http_url, server.grpc_url, server.metrics_url


def _exercise(http: str, grpc: str) -> None:
    """The same requests to each server, one at a time: batch 4 over both protocols, repeats that the
    cache answers, and the ensemble (whose step finds its answer in the cache once)."""
    clients: list[Any] = [httpclient.InferenceServerClient(http), grpcclient.InferenceServerClient(grpc)]
    try:
        for seed in (0.0, 100.0, 0.0):
            for module, client in zip((httpclient, grpcclient), clients, strict=True):
                for model, name in (("ident_b", "INPUT0"), ("ident_nb", "INPUT0"), ("ens", "IN")):
                    data = np.arange(12, dtype=np.float32).reshape(4, 3) + seed
                    tensor = module.InferInput(name, [4, 3], "FP32")
                    tensor.set_data_from_numpy(data)
                    client.infer(model, [tensor])
    finally:
        for client in clients:
            client.close()


def _families(text: str) -> dict[str, tuple[str, str]]:
    """``{family: (help, type)}``."""
    helps = {line.split(" ", 3)[2]: line.split(" ", 3)[3] for line in text.splitlines() if line.startswith("# HELP ")}
    kinds = {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE ")}
    return {name: (helps.get(name, ""), kinds[name]) for name in kinds}


@pytest.fixture(scope="module")
def both(triton: tuple[str, str, str], naiad: tuple[str, str, str]) -> dict[str, str]:
    texts = {}
    for name, (http, grpc, metrics) in (("triton", triton), ("naiad", naiad)):
        _exercise(http, grpc)
        time.sleep(2.5)  # Triton refreshes some gauges (the cache's among them) on a timer of its own
        client = RawClient(metrics)
        try:
            texts[name] = client.request("GET", "/metrics").body.decode()
        finally:
            client.close()
    return texts


def test_every_family_triton_has_with_its_help_and_type(both: dict[str, str]) -> None:
    theirs, ours = _families(both["triton"]), _families(both["naiad"])
    compared = {name: kind for name, kind in theirs.items() if not name.startswith(("nv_gpu_", "nv_energy_"))}
    assert {name: ours.get(name) for name in compared} == compared


def test_every_count_is_tritons(both: dict[str, str]) -> None:
    theirs, ours = samples(both["triton"]), samples(both["naiad"])
    for (name, labels), value in theirs.items():
        if name.startswith("nv_") and not any(part in name for part in _NOT_COMPARED) and "quantile" not in dict(labels):
            assert (name, labels) in ours, (name, sorted(labels))
            assert ours[(name, labels)] == value, (name, sorted(labels), ours[(name, labels)], value)
    for (name, labels) in ours:  # and no series Triton leaves out (the request summary of a cached model)
        if name.startswith("nv_inference_request_summary_us"):
            assert (name, labels) in theirs, (name, sorted(labels))
