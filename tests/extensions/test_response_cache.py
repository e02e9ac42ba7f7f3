"""The response cache with tritonclient: hits skip the model (it says who answered and how many times
it ran), entries hold every output, concurrent identical and different requests each get their own
right answer, models never share entries, and the statistics count hits and misses as Triton does."""

from __future__ import annotations

import json
import random
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from tests.extensions.clients import client_for
from tests.support.models import IDENTITY_PY, write_model
from tests.support.server import ServerProcess


def _infer(
    protocol: str,
    server: ServerProcess,
    data: np.ndarray,
    model: str = "counting",
    outputs: tuple[str, ...] = ("OUTPUT0", "WHO"),
    parameters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    with client_for(protocol, server) as client:
        tensor = client.input("INPUT0", list(data.shape), "INT32")
        tensor.set_data_from_numpy(data)
        requested = [client.output(name) for name in outputs]
        result = client.client.infer(model, [tensor], outputs=requested, parameters=parameters)
        return {name: result.as_numpy(name) for name in outputs}


def _stats(server: ServerProcess, model: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats") as answer:
        document: dict[str, Any] = json.loads(answer.read())
    return document["model_stats"][0]


def _unique(size: int = 4) -> np.ndarray:
    return np.array(random.sample(range(1, 2**30), size), dtype=np.int32)


def test_a_repeat_is_answered_from_the_cache(protocol: str, ext_server: ServerProcess) -> None:
    data = _unique()
    before = _stats(ext_server, "counting")
    first = _infer(protocol, ext_server, data)
    middle = _stats(ext_server, "counting")
    second = _infer(protocol, ext_server, data, outputs=("OUTPUT0",))
    third = _infer(protocol, ext_server, data, outputs=("WHO",))
    after = _stats(ext_server, "counting")
    np.testing.assert_array_equal(first["OUTPUT0"], data * 2)
    np.testing.assert_array_equal(second["OUTPUT0"], data * 2)
    assert third["WHO"].tolist() == first["WHO"].tolist()  # the model did not run again
    assert middle["execution_count"] == before["execution_count"] + 1
    assert after["execution_count"] == middle["execution_count"]
    hits, misses = (after["inference_stats"][k]["count"] - before["inference_stats"][k]["count"]
                    for k in ("cache_hit", "cache_miss"))
    assert (hits, misses) == (2, 1)
    assert after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] == 3
    computed = after["inference_stats"]["compute_infer"]["count"] - before["inference_stats"]["compute_infer"]["count"]
    assert computed == 1


def test_hits_and_misses_are_metrics(ext_server: ServerProcess) -> None:
    _infer("http", ext_server, _unique())
    with urllib.request.urlopen(f"http://{ext_server.metrics_url}/metrics") as answer:
        text = answer.read().decode()
    for family in ("nv_cache_num_hits_per_model", "nv_cache_num_misses_per_model",
                   "nv_cache_hit_duration_per_model", "nv_cache_miss_duration_per_model"):
        assert f'{family}{{model="counting",version="1"}}' in text
    assert 'nv_cache_num_misses_per_model{model="add_sub"' not in text  # no cache, no series


def test_concurrent_identical_and_different_requests(protocol: str, ext_server: ServerProcess) -> None:
    shared = _unique()
    inputs = [shared] * 16 + [_unique() for _ in range(16)]
    random.shuffle(inputs)
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda data: _infer(protocol, ext_server, data), inputs))
    for data, result in zip(inputs, results, strict=True):
        np.testing.assert_array_equal(result["OUTPUT0"], data * 2)
        assert result["WHO"][0].startswith(b"counting:")
    # every different input ran the model; the shared one ran it at most once per concurrent miss
    distinct_runs = {r["WHO"][0] for d, r in zip(inputs, results, strict=True) if d is not shared}
    assert len(distinct_runs) == 16


def test_twins_in_flight_together_count_one_miss(protocol: str, ext_server: ServerProcess) -> None:
    """As Triton counts them (its local cache refuses the second insertion of a key, and a request
    whose insertion is refused so is no miss): identical requests that all missed and ran the model
    count one miss, the first kept; those answered from the cache count hits."""
    data = _unique()
    before = _stats(ext_server, "counting")["inference_stats"]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda _: _infer(protocol, ext_server, data), range(8)))
    after = _stats(ext_server, "counting")["inference_stats"]
    ran = {result["WHO"][0] for result in results}
    delta = {key: after[key]["count"] - before[key]["count"] for key in ("success", "cache_hit", "cache_miss")}
    assert delta["success"] == 8 and delta["cache_miss"] == 1
    assert delta["cache_hit"] == 8 - len(ran)  # (each run answered with a token of its own)


def test_models_never_share_entries(protocol: str, ext_server: ServerProcess) -> None:
    data = _unique()
    for model in ("counting", "counting_twin", "counting", "counting_twin"):
        result = _infer(protocol, ext_server, data, model=model)
        assert result["WHO"][0].startswith(f"{model}:".encode())


def test_request_parameters_are_part_of_the_key(protocol: str, ext_server: ServerProcess) -> None:
    data = _unique()
    one = _infer(protocol, ext_server, data, parameters={"variant": "a"})
    two = _infer(protocol, ext_server, data, parameters={"variant": "b"})
    again = _infer(protocol, ext_server, data, parameters={"variant": "a"})
    assert one["WHO"].tolist() == again["WHO"].tolist()
    assert one["WHO"].tolist() != two["WHO"].tolist()


def test_decoupled_and_sequence_models_with_the_cache_are_refused_at_load(ext_server: ServerProcess) -> None:
    request = urllib.request.Request(f"http://{ext_server.http_url}/v2/repository/index", data=b"{}")
    with urllib.request.urlopen(request) as answer:
        index = {entry["name"]: entry for entry in json.loads(answer.read())}
    entry = index["decoupled_cached"]
    assert entry.get("state") != "READY"
    assert "Response Cache does not currently support model decoupled_cached with 'decoupled' transaction " \
           "policy. Please disable the response cache." in entry.get("reason", "")
    entry = index["sequence_cached"]
    assert entry.get("state") != "READY"
    assert "Response Cache does not currently support model sequence_cached with sequence batching " \
           "scheduler. Please disable the response cache." in entry.get("reason", "")
    entry = index["ensemble_cached"]  # (decoupled: its step is)
    assert entry.get("state") != "READY"
    assert "Response Cache does not currently support model ensemble_cached with 'decoupled' transaction " \
           "policy. Please disable the response cache." in entry.get("reason", "")
    assert index["decoupled_step"]["state"] == "READY"


def test_a_caching_models_families_before_any_request(tmp_path: Path) -> None:
    """As Triton 2.51 shows them (checked side by side): a model that uses the cache has its per-model
    cache counters from its load on, at 0, and no request summary, whose family is then not declared
    at all while its other summaries are."""
    write_model(
        tmp_path,
        "cached",
        """
        backend: "python"
        input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
        output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
        response_cache { enable: true }
        """,
        IDENTITY_PY,
    )
    args = ["--cache-config=local,size=1048576", "--metrics-config=summary_latencies=true"]
    with ServerProcess([tmp_path], args) as server:
        with urllib.request.urlopen(f"http://{server.metrics_url}/metrics") as answer:
            text = answer.read().decode()
    for family in ("nv_cache_num_hits_per_model", "nv_cache_num_misses_per_model",
                   "nv_cache_hit_duration_per_model", "nv_cache_miss_duration_per_model"):
        assert f'{family}{{model="cached",version="1"}} 0\n' in text
    assert "nv_inference_request_summary" not in text
    assert 'nv_inference_queue_summary_us_count{model="cached",version="1"} 0\n' in text
