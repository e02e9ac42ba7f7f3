"""Field for field against NVIDIA's Triton 2.51 on the same model and the same requests.

Runs ``shared/reference/triton.sh`` (Triton's CPU build with its Python backend), which needs the venv
it prepares in ``~/.cache/naiad-reference/triton``; without it the test is skipped.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.observability.conftest import samples, types
from tests.support.http import RawClient
from tests.support.reference import SCRIPT, VENV, installed, reference_triton
from tests.support.server import EXAMPLES, ServerProcess

ADD_SUB = {
    "id": "same",
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
    ],
}

pytestmark = pytest.mark.skipif(
    not installed(),
    reason=f"the reference Triton is not installed ({SCRIPT} and its venv {VENV})",
)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("reference-repo")
    shutil.copytree(EXAMPLES / "add_sub", repo / "add_sub")
    return repo


@pytest.fixture(scope="module")
def triton(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with reference_triton(repo, tmp_path_factory.mktemp("triton") / "triton.log") as reference:
        yield reference.http, reference.metrics


@pytest.fixture(scope="module")
def naiad(repo: Path) -> Iterator[tuple[str, str]]:
    with ServerProcess([repo]) as server:
        yield server.http_url, server.metrics_url


def _exercise(http: str) -> RawClient:
    client = RawClient(http)
    for _ in range(3):
        assert client.post_json("/v2/models/add_sub/infer", ADD_SUB).status == 200
    assert client.post_json("/v2/models/add_sub/infer", {"inputs": []}).status == 400  # not the model's
    # Triton's Python backend reports a request's statistics after its response is sent (its
    # PbMetricReporter), so a client can read them one request short for a moment: wait for all three
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stats = client.request("GET", "/v2/models/add_sub/stats").json()["model_stats"][0]
        if stats["inference_stats"]["success"]["count"] == 3:
            break
        time.sleep(0.05)
    return client


def _shape(document: Any) -> Any:
    """Keys, nesting and value types, without the values."""
    if isinstance(document, dict):
        return {key: _shape(value) for key, value in document.items()}
    if isinstance(document, list):
        return [_shape(item) for item in document]
    return type(document).__name__


def _counts(document: Any) -> Any:
    """The document without durations and times: what must be equal after the same requests."""
    if isinstance(document, dict):
        return {k: _counts(v) for k, v in document.items() if k not in ("ns", "last_inference")}
    if isinstance(document, list):
        return [_counts(item) for item in document]
    return document


@pytest.fixture(scope="module")
def both(triton: tuple[str, str], naiad: tuple[str, str]) -> Iterator[dict[str, tuple[RawClient, RawClient]]]:
    clients = {"triton": (_exercise(triton[0]), RawClient(triton[1])), "naiad": (_exercise(naiad[0]), RawClient(naiad[1]))}
    yield clients
    for http, metrics in clients.values():
        http.close()
        metrics.close()


def test_statistics_documents_match(both: dict[str, tuple[RawClient, RawClient]]) -> None:
    for path in ("/v2/models/stats", "/v2/models/add_sub/stats", "/v2/models/add_sub/versions/1/stats"):
        theirs, ours = (both[name][0].request("GET", path).json() for name in ("triton", "naiad"))
        assert _shape(ours) == _shape(theirs)
        assert list(ours["model_stats"][0]) == list(theirs["model_stats"][0])  # key order too
        assert _counts(ours) == _counts(theirs)
    for path in ("/v2/models/nope/stats", "/v2/models/add_sub/versions/2/stats"):
        theirs, ours = (both[name][0].request("GET", path) for name in ("triton", "naiad"))
        assert (ours.status, ours.json()) == (theirs.status, theirs.json())


def test_metrics_match_for_tritons_families(both: dict[str, tuple[RawClient, RawClient]]) -> None:
    theirs, ours = (both[name][1].request("GET", "/metrics").body.decode() for name in ("triton", "naiad"))
    their_types, our_types = types(theirs), types(ours)
    compared = [name for name in their_types if name.startswith(("nv_inference_", "nv_cpu_"))]
    assert {name: our_types.get(name) for name in compared} == {name: their_types[name] for name in compared}
    their_samples, our_samples = samples(theirs), samples(ours)
    for (name, labels), value in their_samples.items():
        if name.startswith("nv_inference_"):
            assert (name, labels) in our_samples, (name, labels)
            if not name.endswith("_duration_us"):
                assert our_samples[(name, labels)] == value, (name, labels)


def test_logging_and_trace_settings_match(both: dict[str, tuple[RawClient, RawClient]]) -> None:
    for path in ("/v2/logging", "/v2/trace/setting", "/v2/models/add_sub/trace/setting"):
        theirs, ours = (both[name][0].request("GET", path).json() for name in ("triton", "naiad"))
        assert ours == theirs
    theirs, ours = (both[name][0].request("GET", "/v2").json() for name in ("triton", "naiad"))
    assert ours == theirs  # name, version and the extensions in their order
