"""One server over purpose-made models, with a trace file configured and latency summaries on."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scheduling.models import write_probe
from tests.support import modes
from tests.support.http import RawClient
from tests.support.models import write_model
from tests.support.server import EXAMPLES, ServerProcess

# Every test through a server taking frontend_workers runs in both server modes (tests.support.modes).
frontend_workers = modes.frontend_workers


#: A Python model that logs one line at each level per request (through ``pb_utils.Logger``).
CHATTY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tag = request.request_id()
            pb_utils.Logger.log_verbose("verbose " + tag)
            pb_utils.Logger.log_info("info " + tag)
            pb_utils.Logger.log_warn("warning " + tag)
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", tensor.as_numpy())]))
        return responses
"""

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def write_repository(repo: Path) -> Path:
    write_probe(repo, "batched", extra="dynamic_batching { }")
    write_probe(repo, "bounded", max_batch_size=1, extra="dynamic_batching { default_queue_policy { max_queue_size: 1 } }")
    write_probe(repo, "plain")
    write_probe(repo, "shaped")
    write_model(
        repo,
        "chatty",
        """
        name: "chatty"
        backend: "python"
        max_batch_size: 0
        input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
        """,
        CHATTY_PY,
    )
    shutil.copytree(EXAMPLES / "add_sub", repo / "add_sub")
    return repo


@pytest.fixture(scope="package")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repository(tmp_path_factory.mktemp("observability-repo"))


@pytest.fixture(scope="package")
def trace_file(tmp_path_factory: pytest.TempPathFactory, frontend_workers: int) -> Path:
    """One per server mode: each server numbers its indexed trace files from 0."""
    return tmp_path_factory.mktemp(f"traces-{frontend_workers}") / "trace.json"


@pytest.fixture(scope="package")
def server(repo: Path, trace_file: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    args = [
        f"--trace-config=triton,file={trace_file}",
        "--metrics-config=summary_latencies=true",
        "--metrics-interval-ms=100",
    ]
    with ServerProcess([repo], args, frontend_workers=frontend_workers) as process:
        yield process


@pytest.fixture
def client(server: ServerProcess) -> Iterator[RawClient]:
    client = RawClient(server.http_url)
    yield client
    client.close()


def scrape(server: ServerProcess) -> str:
    metrics = RawClient(server.metrics_url)
    try:
        response = metrics.request("GET", "/metrics")
    finally:
        metrics.close()
    assert response.status == 200, response.body
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return response.body.decode()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """``{(name, labels): value}`` of every sample line of an exposition."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = _SAMPLE.match(line)
            assert match is not None, line
            labels = frozenset(LABEL.findall(match["labels"] or ""))
            out[(match["name"], labels)] = float(match["value"])
    return out


def types(text: str) -> dict[str, str]:
    """``{family: type}`` from the ``# TYPE`` lines."""
    return {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE ")}


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, frozenset(labels.items()))]
