"""The statistics extension and the Prometheus counters against requests whose fate is known.

Requests are held at a gate (a model execution blocked on a file) so that a batch forms, a queue fills
or a client leaves while its request waits; then the statistics (HTTP and gRPC) and ``/metrics`` must
count exactly what happened.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient

from tests.observability.conftest import scrape, types, value
from tests.scheduling.models import SETTLE, Gate, infer, outputs, send_and_abandon
from tests.support.http import RawClient, RawResponse
from tests.support.server import ServerProcess


@pytest.fixture
def pool() -> Any:
    with ThreadPoolExecutor(8) as executor:
        yield executor


def held(
    pool: ThreadPoolExecutor, server: ServerProcess, model: str, tmp_path: Path
) -> tuple[Gate, Future[RawResponse]]:
    gate = Gate(tmp_path)
    first = pool.submit(infer, server.http_url, model, "gate", **gate.params)
    gate.wait_entered()
    return gate, first


def stats_of(client: RawClient, model: str) -> dict[str, Any]:
    response = client.request("GET", f"/v2/models/{model}/stats")
    assert response.status == 200, response.body
    (entry,) = response.json()["model_stats"]
    return dict(entry)


def test_a_formed_batch_counts_requests_elements_and_one_execution(
    server: ServerProcess, client: RawClient, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    gate, first = held(pool, server, "batched", tmp_path)
    queued = [pool.submit(infer, server.http_url, "batched", f"r{rows}", rows) for rows in (1, 2, 4)]
    time.sleep(SETTLE)
    gate.open()
    assert first.result().status == 200
    assert {outputs(f.result())["ROWS"][0] for f in queued} == {7}  # one batch of 1 + 2 + 4 rows

    stats = stats_of(client, "batched")
    inference = stats["inference_stats"]
    assert (stats["inference_count"], stats["execution_count"]) == (8, 2)
    assert inference["success"]["count"] == inference["queue"]["count"] == 4
    assert inference["compute_infer"]["count"] == 4 and inference["fail"] == {"count": 0, "ns": 0}
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]] == [(1, 1), (7, 1)]
    assert inference["queue"]["ns"] >= 3 * int(SETTLE * 0.5e9)  # three requests waited behind the gate
    assert inference["success"]["ns"] >= inference["queue"]["ns"] + inference["compute_infer"]["ns"]
    assert abs(stats["last_inference"] - time.time() * 1000) < 60_000

    text = scrape(server)
    labels = {"model": "batched", "version": "1"}
    assert value(text, "nv_inference_request_success", **labels) == 4
    assert value(text, "nv_inference_count", **labels) == 8
    assert value(text, "nv_inference_exec_count", **labels) == 2
    assert value(text, "nv_inference_pending_request_count", **labels) == 0
    assert value(text, "nv_inference_queue_duration_us", **labels) == inference["queue"]["ns"] // 1000
    assert value(text, "nv_inference_request_duration_us", **labels) == inference["success"]["ns"] // 1000
    for name in ("request", "queue", "compute"):
        family = f"nv_inference_{name}_histogram_ms"
        assert types(text)[family] == "histogram"
        assert (
            value(text, f"{family}_count", **labels)
            == value(text, f"{family}_bucket", le="+Inf", **labels)
            == 4
        )
    queued_ms = value(text, "nv_inference_queue_histogram_ms_sum", **labels)
    assert queued_ms == pytest.approx(inference["queue"]["ns"] / 1e6)
    assert value(text, "nv_inference_queue_histogram_ms_bucket", le="0.05", **labels) <= 1  # only the gate's
    assert value(text, "nv_inference_request_summary_us_count", **labels) == 4
    assert value(text, "nv_inference_request_summary_us", quantile="0.5", **labels) > 0


def test_failures_are_counted_by_reason(
    server: ServerProcess, client: RawClient, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    gate, first = held(pool, server, "bounded", tmp_path)
    send_and_abandon(server.http_url, "bounded", "left")  # queued, then its client goes: CANCELED
    time.sleep(SETTLE)
    waiting = pool.submit(infer, server.http_url, "bounded", "waiting")
    time.sleep(SETTLE)
    rejected = infer(server.http_url, "bounded", "overflow")  # the queue (size 1) is full: REJECTED
    assert (rejected.status, rejected.error) == (503, "Exceeds maximum queue size")
    gate.open()
    assert first.result().status == waiting.result().status == 200
    # an error the model gives as the request's response is a success, as Triton 2.51 counts it (checked
    # side by side: its Python backend reports a failure only where it could send no response)
    assert infer(server.http_url, "bounded", "bad", fail=True).status == 400
    assert infer(server.http_url, "bounded", "broken", **{"raise": True}).status == 500  # it raises: BACKEND

    stats = stats_of(client, "bounded")
    inference = stats["inference_stats"]
    assert (inference["success"]["count"], inference["fail"]["count"]) == (3, 3)
    assert (stats["inference_count"], stats["execution_count"]) == (3, 4)  # inferences of the successes
    text = scrape(server)
    failures = {
        reason: value(text, "nv_inference_request_failure", model="bounded", version="1", reason=reason)
        for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER")
    }
    assert failures == {"REJECTED": 1, "CANCELED": 1, "BACKEND": 1, "OTHER": 0}
    assert types(text)["nv_inference_request_failure"] == "counter"
    assert value(text, "nv_inference_exec_count", model="bounded", version="1") == 4  # "left" never ran
    assert value(text, "nv_inference_count", model="bounded", version="1") == 3
    assert value(text, "nv_inference_request_success", model="bounded", version="1") == 3
    # Naiad's own family: which of those successes were errors the model gave (a canary counts them)
    assert value(text, "nv_inference_request_error_response", model="bounded", version="1") == 1


def test_the_document_has_tritons_shape(server: ServerProcess, client: RawClient) -> None:
    assert infer(server.http_url, "shaped", "one").status == 200
    stats = stats_of(client, "shaped")
    duration = {"count": 1, "ns": stats["inference_stats"]["success"]["ns"]}
    assert stats["inference_stats"]["success"] == duration and duration["ns"] > 0
    zero = {"count": 0, "ns": 0}
    expected = {
        "name": "shaped",
        "version": "1",
        "last_inference": stats["last_inference"],
        "inference_count": 1,
        "execution_count": 1,
        "inference_stats": {
            "success": duration,
            "fail": zero,
            "queue": {"count": 1, "ns": stats["inference_stats"]["queue"]["ns"]},
            "compute_input": {"count": 1, "ns": stats["inference_stats"]["compute_input"]["ns"]},
            "compute_infer": {"count": 1, "ns": stats["inference_stats"]["compute_infer"]["ns"]},
            "compute_output": {"count": 1, "ns": stats["inference_stats"]["compute_output"]["ns"]},
            "cache_hit": zero,
            "cache_miss": zero,
        },
        "response_stats": {},
        "batch_stats": [
            {
                "batch_size": 1,
                "compute_input": stats["inference_stats"]["compute_input"],
                "compute_infer": stats["inference_stats"]["compute_infer"],
                "compute_output": stats["inference_stats"]["compute_output"],
            }
        ],
        "memory_usage": [],
    }
    assert stats == expected
    assert list(stats) == list(expected) and list(stats["inference_stats"]) == list(
        expected["inference_stats"]
    )
    assert client.request("GET", "/v2/models/shaped/versions/1/stats").json() == {"model_stats": [stats]}
    every = client.request("GET", "/v2/models/stats").json()["model_stats"]
    assert [entry["name"] for entry in every] == [
        "add_sub",
        "batched",
        "bounded",
        "chatty",
        "plain",
        "shaped",
    ]
    assert "statistics" in client.request("GET", "/v2").json()["extensions"]


def test_unknown_models_and_versions_get_tritons_errors(client: RawClient) -> None:
    for path, message in (
        ("/v2/models/nope/stats", "requested model 'nope' is not available"),
        ("/v2/models/nope/versions/1/stats", "requested model 'nope' is not available"),
        ("/v2/models/plain/versions/9/stats", "requested model version is not available for model 'plain'"),
    ):
        response = client.request("GET", path)
        assert (response.status, response.error) == (400, message)
    assert client.request("POST", "/v2/models/stats").status == 405


def test_grpc_model_statistics_matches_http(server: ServerProcess, client: RawClient) -> None:
    assert infer(server.http_url, "plain", "grpc-check").status == 200
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        answer = grpc.get_inference_statistics("plain", as_json=True)
        with pytest.raises(grpcclient.InferenceServerException) as error:
            grpc.get_inference_statistics("nope")
    finally:
        grpc.close()
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "requested model 'nope' is not available" in error.value.message()
    (entry,) = answer["model_stats"]
    http = stats_of(client, "plain")
    assert entry["name"] == "plain" and int(entry["inference_count"]) == http["inference_count"]
    assert int(entry["inference_stats"]["success"]["ns"]) == http["inference_stats"]["success"]["ns"]
    assert [int(b["batch_size"]) for b in entry["batch_stats"]] == [1]


def test_the_histograms_follow_every_request_between_scrapes(
    server: ServerProcess, client: RawClient
) -> None:
    """A version's histogram lines are kept between scrapes while its figures stay the same; each
    answered request must still show in the next scrape."""
    labels = {"model": "shaped", "version": "1"}
    assert infer(server.http_url, "shaped", "first").status == 200
    start = value(scrape(server), "nv_inference_request_histogram_ms_count", **labels)
    for sent in (1, 2, 3):
        assert infer(server.http_url, "shaped", f"again{sent}").status == 200
        success = stats_of(client, "shaped")["inference_stats"]["success"]
        text = scrape(server)
        for name in ("request", "queue", "compute"):
            family = f"nv_inference_{name}_histogram_ms"
            count = value(text, f"{family}_count", **labels)
            assert count == value(text, f"{family}_bucket", le="+Inf", **labels) == start + sent
        assert success["count"] == start + sent
        total_ms = value(text, "nv_inference_request_histogram_ms_sum", **labels)
        assert total_ms == pytest.approx(success["ns"] / 1e6)
