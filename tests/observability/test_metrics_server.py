"""``/metrics`` as a scraper sees it: families, types and labels, and the flags that shape it."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from naiad.metrics.gpu import open_gpus

from tests.observability.conftest import LABEL, samples, scrape, types, value
from tests.scheduling.models import infer
from tests.support.http import RawClient
from tests.support.models import IDENTITY_PY, write_model
from tests.support.server import ServerProcess

#: Triton's per-model families and their types.
TRITON_FAMILIES = {
    "nv_inference_request_success": "counter",
    "nv_inference_request_failure": "counter",
    "nv_inference_count": "counter",
    "nv_inference_exec_count": "counter",
    "nv_inference_request_duration_us": "counter",
    "nv_inference_queue_duration_us": "counter",
    "nv_inference_compute_input_duration_us": "counter",
    "nv_inference_compute_infer_duration_us": "counter",
    "nv_inference_compute_output_duration_us": "counter",
    "nv_inference_pending_request_count": "gauge",
}
NAIAD_FAMILIES = {
    "nv_inference_request_histogram_ms": "histogram",
    "nv_inference_queue_histogram_ms": "histogram",
    "nv_inference_compute_histogram_ms": "histogram",
    "nv_model_state": "gauge",
    "nv_model_load_duration_secs": "gauge",
    "nv_model_loaded_memory_bytes": "gauge",
}
CPU_FAMILIES = {"nv_cpu_utilization": "gauge", "nv_cpu_memory_total_bytes": "gauge", "nv_cpu_memory_used_bytes": "gauge"}


def test_families_have_tritons_names_types_and_labels(server: ServerProcess) -> None:
    assert infer(server.http_url, "plain", "scraped").status == 200
    text = scrape(server)
    found = types(text)
    assert {name: found.get(name) for name in TRITON_FAMILIES} == TRITON_FAMILIES
    assert {name: found.get(name) for name in NAIAD_FAMILIES} == NAIAD_FAMILIES
    assert {name: found.get(name) for name in CPU_FAMILIES} == CPU_FAMILIES
    assert "nv_inference_request_success_total" not in text  # no client-library renaming
    assert "summary" == found["nv_inference_request_summary_us"]  # --metrics-config summary_latencies=true
    for (name, labels), _ in samples(text).items():
        keys = {key for key, _ in labels}
        if name in TRITON_FAMILIES and name != "nv_inference_request_failure":
            assert keys == {"model", "version"}, (name, keys)
    for line in text.splitlines():  # labels sorted by name, a histogram's le last, as Triton prints them
        if "{" in line and not line.startswith("#"):
            keys = [key for key, _ in LABEL.findall(line[line.index("{") : line.rindex("}")])]
            assert keys == sorted(keys, key=lambda key: (key == "le", key)), line
    assert 0 <= value(text, "nv_cpu_utilization") <= 1
    assert value(text, "nv_model_state", model="plain", version="1", state="READY") == 1
    assert value(text, "nv_model_state", model="plain", version="1", state="LOADING") == 0
    assert value(text, "nv_model_load_duration_secs", model="plain", version="1") > 0
    if open_gpus() is None:
        assert "nv_gpu_" not in text and "nv_energy_consumption" not in text
    metrics = RawClient(server.metrics_url)
    try:
        assert metrics.request("GET", "/other").status == 404
        assert metrics.request("POST", "/metrics").status == 405
    finally:
        metrics.close()


def test_flags_turn_families_off_and_unloaded_models_leave(repo: Path) -> None:
    args = [
        "--allow-cpu-metrics=false",
        "--allow-gpu-metrics=false",
        "--metrics-config=counter_latencies=false",
        "--metrics-config=histogram_latencies=false",
        "--model-control-mode=explicit",
        "--load-model=plain",
        "--load-model=add_sub",
    ]
    with ServerProcess([repo], args) as server:
        assert infer(server.http_url, "plain", "counted").status == 200
        text = scrape(server)
        found = types(text)
        assert not {name for name in found if name.startswith(("nv_cpu", "nv_gpu"))}
        assert not {name for name in found if name.endswith(("_duration_us", "_histogram_ms"))}
        assert value(text, "nv_inference_request_success", model="plain", version="1") == 1
        client = RawClient(server.http_url)
        try:
            assert client.request("POST", "/v2/repository/models/plain/unload").status == 200
        finally:
            client.close()
        text = scrape(server)
        assert ("nv_inference_request_success", frozenset({("model", "plain"), ("version", "1")})) not in samples(text)
        assert value(text, "nv_model_state", model="plain", version="1", state="UNAVAILABLE") == 1
        assert value(text, "nv_inference_request_success", model="add_sub", version="1") == 0


def test_allow_metrics_false_serves_no_metrics(repo: Path, frontend_workers: int) -> None:
    # both modes: with workers the engine builds a listener set of its own for /metrics alone
    with ServerProcess([repo], ["--allow-metrics=false"], frontend_workers=frontend_workers) as server:
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", server.metrics_port), timeout=2):
            pass


#: A decoupled model whose first response comes at once and its last 0.6 s later.
SLOW_END_PY = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            tensor = pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy())
            sender.send(pb_utils.InferenceResponse([tensor]))
            time.sleep(0.6)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def test_first_response_histogram_as_tritons(tmp_path: Path) -> None:
    """``histogram_latencies=true`` given: Triton's ``nv_inference_first_response_histogram_ms``, in
    its buckets (100, 500, 2000, 5000 ms) or those a model's ``model_metrics`` sets; a decoupled
    model's requests counted at their first response, not their last."""
    io = """
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
    """
    write_model(tmp_path, "plain", f'backend: "python"\nmax_batch_size: 8\n{io}', IDENTITY_PY)
    buckets = 'model_metrics { metric_control [ { metric_identifier { family: "nv_inference_first_response_histogram_ms" } histogram_options { buckets: [ 1, 10 ] } } ] }'
    write_model(tmp_path, "tuned", f'backend: "python"\nmax_batch_size: 8\n{io}\n{buckets}', IDENTITY_PY)
    decoupled = 'model_transaction_policy { decoupled: true }'
    write_model(tmp_path, "streamed", f'backend: "python"\n{io}\n{decoupled}', SLOW_END_PY)
    steps = (
        'platform: "ensemble"\n' + io + 'ensemble_scheduling { step [ { model_name: "streamed" model_version: -1 '
        'input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "OUTPUT0" } } ] }'
    )
    write_model(tmp_path, "chained", steps)
    family = "nv_inference_first_response_histogram_ms"
    with ServerProcess([tmp_path], ["--metrics-config=histogram_latencies=true"]) as server:
        for model in ("plain", "plain", "tuned"):
            assert infer(server.http_url, model, "first").status == 200
        _stream_once(server, "streamed")
        _stream_once(server, "chained")  # an ensemble of it: both count their first response
        text = scrape(server)
    assert types(text)[family] == "histogram"
    assert value(text, f"{family}_count", model="plain", version="1") == 2
    assert value(text, f"{family}_bucket", model="plain", version="1", le="5000") == 2
    assert (model_bucket := {labels for (name, labels) in samples(text) if name == f"{family}_bucket" and ("model", "tuned") in labels})
    assert {dict(labels)["le"] for labels in model_bucket} == {"1", "10", "+Inf"}
    assert value(text, f"{family}_count", model="tuned", version="1") == 1
    # the first of its two responses came at once: within 500 ms, where its end (0.6 s) is not
    for model, requests in (("streamed", 2), ("chained", 1)):
        assert value(text, f"{family}_bucket", model=model, version="1", le="500") == requests
        assert value(text, f"{family}_count", model=model, version="1") == requests


def test_first_response_histogram_is_off_by_default(server: ServerProcess) -> None:
    """As in Triton, where it is the one histogram and off unless asked for (Naiad's own latency
    histograms are on)."""
    assert "nv_inference_first_response_histogram_ms" not in scrape(server)


def _stream_once(server: ServerProcess, model: str) -> None:
    answers: list[object] = []
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: answers.append(error or result))
        tensor = grpcclient.InferInput("INPUT0", [1], "INT32")
        tensor.set_data_from_numpy(np.array([3], dtype=np.int32))
        client.async_stream_infer(model, [tensor])
        client.stop_stream()  # (waits for the stream's end)
    finally:
        client.close()
    assert len(answers) == 1 and not isinstance(answers[0], Exception), answers
