"""More models than memory: models loaded by their first request, evicted under a memory budget
(docs/models-on-demand.md; the contract in issue #25).

Real servers in both modes (one process; frontend workers over an engine), real tritonclient HTTP and
gRPC clients; the ``ballast`` models (tests/repository/density_models.py) hold a known amount of memory
in their model processes, so the budget decides which of them fit.
"""

from __future__ import annotations

import json
import queue
import re
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from naiad.cli import parse_settings
from tritonclient.utils import InferenceServerException

from tests.repository.density_models import write_ballast
from tests.support import modes
from tests.support.server import ServerProcess

frontend_workers = modes.frontend_workers

MIB = 2**20


def infer_http(server: ServerProcess, model: str, value: int = 1) -> int:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    try:
        tensor = httpclient.InferInput("INPUT0", [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
        return int(client.infer(model, [tensor]).as_numpy("OUTPUT0")[0])
    finally:
        client.close()


def infer_grpc(server: ServerProcess, model: str, value: int = 1) -> int:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        tensor = grpcclient.InferInput("INPUT0", [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
        return int(client.infer(model, [tensor]).as_numpy("OUTPUT0")[0])
    finally:
        client.close()


def http_error(server: ServerProcess, model: str) -> tuple[str, str]:
    """The status and message a request for ``model`` fails with."""
    with pytest.raises(InferenceServerException) as caught:
        infer_http(server, model)
    return str(caught.value.status()), caught.value.message()


def server_ready(server: ServerProcess) -> tuple[bool, bool]:
    """Readiness as HTTP and gRPC report it (``/v2/health/ready``, ServerReady)."""
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        return http.is_server_ready(), grpc.is_server_ready()
    finally:
        http.close()
        grpc.close()


def metrics(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=30) as answer:
        return str(answer.read().decode())


def metric(text: str, name: str, **labels: str) -> float:
    """One sample's value (0 when the series is absent, as for a counter never incremented)."""
    wanted = ",".join(f'{key}="{value}"' for key, value in labels.items())
    pattern = rf"^{re.escape(name)}{re.escape('{' + wanted + '}') if labels else ''} (\S+)$"
    found = re.findall(pattern, text, re.MULTILINE)
    assert len(found) <= 1, (name, labels)
    return float(found[0]) if found else 0.0


def index(server: ServerProcess) -> dict[str, dict[str, Any]]:
    """The repository index by model, with Naiad's ``memory_bytes`` asked for."""
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/index", b'{"memory_bytes": true}')
    with urllib.request.urlopen(request, timeout=30) as answer:
        return {entry["name"]: entry for entry in json.loads(answer.read())}


# ---- loading on demand ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demand_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("on-demand")
    write_ballast(repo, "od_shared", mib=1, offset=100, delay=0.5)
    write_ballast(repo, "od_grpc", mib=1, offset=200)
    write_ballast(repo, "od_stream", mib=1, offset=500)
    write_ballast(repo, "od_slow", mib=1, offset=300, delay=8.0)
    write_ballast(repo, "plain", mib=1, offset=400)
    write_ballast(repo, "od_nul", mib=1, offset=600)
    return repo


@pytest.fixture(scope="module")
def demand_server(demand_repo: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    args = [
        "--model-control-mode=explicit",
        "--load-on-demand=od_*",
        "--on-demand-load-timeout-secs=4",  # above a shared first load on a busy machine
    ]
    with ServerProcess([demand_repo], args, frontend_workers=frontend_workers) as server:
        yield server


def test_concurrent_first_requests_share_one_load(demand_server: ServerProcess) -> None:
    assert "state" not in index(demand_server)["od_shared"]  # not loaded at start (EXPLICIT, no --load-model)
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda v: infer_http(demand_server, "od_shared", v), range(10)))
    assert answers == [v + 100 for v in range(10)]
    entry = index(demand_server)["od_shared"]
    assert entry["state"] == "READY"
    assert entry["memory_bytes"] >= MIB  # its model process holds its 1 MiB ballast
    text = metrics(demand_server)
    assert metric(text, "naiad_model_loads_total", model="od_shared", reason="on_demand") == 1
    assert metric(text, "naiad_on_demand_requests_total", result="miss") == 10
    assert metric(text, "naiad_on_demand_wait_seconds_count") == 10
    assert metric(text, "naiad_on_demand_wait_seconds_sum") > 0
    assert metric(text, "naiad_on_demand_wait_seconds_bucket", le="+Inf") == 10
    assert metric(text, "naiad_model_memory_bytes", model="od_shared", version="1") == entry["memory_bytes"]
    hits = metric(text, "naiad_on_demand_requests_total", result="hit")
    assert infer_http(demand_server, "od_shared", 5) == 105
    text = metrics(demand_server)
    assert metric(text, "naiad_on_demand_requests_total", result="hit") == hits + 1
    assert metric(text, "naiad_model_loads_total", model="od_shared", reason="on_demand") == 1


def test_grpc_first_request_loads_the_model(demand_server: ServerProcess) -> None:
    assert infer_grpc(demand_server, "od_grpc", 7) == 207
    assert index(demand_server)["od_grpc"]["state"] == "READY"
    assert metric(metrics(demand_server), "naiad_model_loads_total", model="od_grpc", reason="on_demand") == 1


def test_grpc_stream_first_request_loads_the_model(demand_server: ServerProcess) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(demand_server.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        tensor = grpcclient.InferInput("INPUT0", [1], "INT32")
        tensor.set_data_from_numpy(np.array([7], dtype=np.int32))
        client.async_stream_infer("od_stream", [tensor])
        answer = answers.get(timeout=30)
        client.stop_stream()
    finally:
        client.close()
    assert not isinstance(answer, InferenceServerException), answer
    assert int(answer.as_numpy("OUTPUT0")[0]) == 507
    assert (
        metric(metrics(demand_server), "naiad_model_loads_total", model="od_stream", reason="on_demand") == 1
    )


def test_models_outside_the_patterns_are_unknown_as_before(demand_server: ServerProcess) -> None:
    # in the repository but not matching --load-on-demand: not loaded by a request
    assert http_error(demand_server, "plain") == ("404", "Request for unknown model: 'plain' is not found")
    assert "state" not in index(demand_server)["plain"]
    # matching the pattern but in no repository
    assert http_error(demand_server, "od_nowhere") == (
        "404",
        "Request for unknown model: 'od_nowhere' is not found",
    )
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'plain' is not found"):
        infer_grpc(demand_server, "plain")


def test_a_name_holding_a_nul_is_unknown_and_loads_nothing(demand_server: ServerProcess) -> None:
    """``od_nul\\x00`` matches ``od_*``, but a NUL is the mark in the server's keys between a name and its
    repository: taken as a key it named ``od_nul``, which a request then loaded under a key nothing
    unloads.  It is no model's name: unknown, as any name in no repository, and nothing loads."""
    assert http_error(demand_server, "od_nul\x00") == (
        "404",
        "Request for unknown model: 'od_nul\x00' is not found",
    )
    assert "state" not in index(demand_server)["od_nul"]
    assert metric(metrics(demand_server), "naiad_model_loads_total", model="od_nul", reason="on_demand") == 0


def test_a_load_longer_than_the_timeout_is_unavailable_then_serves(demand_server: ServerProcess) -> None:
    # its load takes 8 s, past the 4 s a request may wait
    assert http_error(demand_server, "od_slow") == ("503", "model 'od_slow' is loading on demand; try again")
    # while it loads the server stays ready (strict readiness): Kubernetes keeps the pod in the Service
    assert index(demand_server)["od_slow"]["state"] == "LOADING"
    assert server_ready(demand_server) == (True, True)
    assert index(demand_server)["od_slow"]["state"] == "LOADING"  # the load was under way throughout
    deadline = time.monotonic() + 30
    while True:  # the load carried on: a later request is answered
        try:
            assert infer_http(demand_server, "od_slow", 1) == 301
            break
        except InferenceServerException:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    text = metrics(demand_server)
    assert metric(text, "naiad_model_loads_total", model="od_slow", reason="on_demand") == 1
    # the request that gave up waiting never ran: the next one is a hit, counted as such
    hits = metric(text, "naiad_on_demand_requests_total", result="hit")
    assert infer_grpc(demand_server, "od_slow", 2) == 302
    assert metric(metrics(demand_server), "naiad_on_demand_requests_total", result="hit") == hits + 1


# ---- flags -------------------------------------------------------------------------------------


def test_density_flags_reach_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = parse_settings(
        [
            "--model-repository=/models",
            "--model-memory-budget=6Gi",
            "--model-gpu-memory-budget=2GB",
            "--load-on-demand=a*",
            "--load-on-demand=b",
            "--on-demand-load-timeout-secs=1.5",
            "--min-residency-secs=0",
        ]
    )
    assert (settings.model_memory_budget, settings.model_gpu_memory_budget) == (6 * 2**30, 2 * 10**9)
    assert settings.load_on_demand == ["a*", "b"]
    assert (settings.on_demand_load_timeout_secs, settings.min_residency_secs) == (1.5, 0)
    defaults = parse_settings(["--model-repository=/models"])
    assert (defaults.model_memory_budget, defaults.load_on_demand) == (None, [])
    assert (defaults.on_demand_load_timeout_secs, defaults.min_residency_secs) == (60, 30)
    monkeypatch.setenv("NAIAD_MODEL_MEMORY_BUDGET", "500Mi")
    monkeypatch.setenv("NAIAD_LOAD_ON_DEMAND", "x*,y")
    monkeypatch.setenv("NAIAD_MIN_RESIDENCY_SECS", "5")
    from_env = parse_settings(["--model-repository=/models"])
    assert (from_env.model_memory_budget, from_env.load_on_demand) == (500 * 2**20, ["x*", "y"])
    assert from_env.min_residency_secs == 5


@pytest.mark.parametrize("flag", ["--model-memory-budget=lots", "--min-residency-secs=-1"])
def test_malformed_density_flags_are_usage_errors(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_settings(["--model-repository=/models", flag])
    assert caught.value.code == 2
    assert flag.split("=")[0] in capsys.readouterr().err
