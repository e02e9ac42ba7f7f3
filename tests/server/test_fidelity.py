"""Where Naiad differed from real Triton 2.51 on the same requests (issue 16, items 1-4 and 6-9).

Each test's docstring says what Triton 2.51 (``shared/reference/triton.sh``, the Python backend, the
same models, ``--cache-config local,size=1048576 --log-verbose 1``) answered to that request.  One
server, started with the same flags, over purpose-made Python models: a batching identity with dynamic
batching and the response cache, a non-batching identity, an ensemble over the batching one, and a
sequence model with a string correlation ID.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.support.http import RawClient
from tests.support.models import IDENTITY_PY, write_model
from tests.support.server import ServerProcess

CACHE_BYTES = 1 << 20


def _write_repository(repo: Path) -> Path:
    write_model(
        repo,
        "ident_b",
        """
        name: "ident_b"
        backend: "python"
        max_batch_size: 8
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
        dynamic_batching { }
        response_cache { enable: true }
        """,
        IDENTITY_PY,
    )
    write_model(
        repo,
        "ident_nb",
        """
        name: "ident_nb"
        backend: "python"
        max_batch_size: 0
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]
        """,
        IDENTITY_PY,
    )
    write_model(
        repo,
        "ens",
        """
        name: "ens"
        platform: "ensemble"
        max_batch_size: 8
        input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
        ensemble_scheduling { step [ {
          model_name: "ident_b" model_version: -1
          input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" }
        } ] }
        """,
    )
    write_model(
        repo,
        "seq_str",
        """
        name: "seq_str"
        backend: "python"
        max_batch_size: 4
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
        sequence_batching {
          control_input [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] } ]
        }
        """,
        IDENTITY_PY,
    )
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = _write_repository(tmp_path_factory.mktemp("fidelity-repo"))
    args = [f"--cache-config=local,size={CACHE_BYTES}", "--log-verbose=1", "--metrics-config=summary_latencies=true"]
    with ServerProcess([repo], args) as process:
        yield process


@pytest.fixture
def raw(server: ServerProcess) -> Iterator[RawClient]:
    client = RawClient(server.http_url)
    yield client
    client.close()


def _infer_body(shape: list[int], start: float = 0.0, **extra: Any) -> str:
    count = int(np.prod(shape))
    inputs = [{"name": "INPUT0", "datatype": "FP32", "shape": shape, "data": [start + i for i in range(count)]}]
    return json.dumps({"inputs": inputs, **extra})


def _infer(protocol: str, server: ServerProcess, model: str, data: np.ndarray[Any, Any], name: str = "INPUT0") -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    try:
        tensor = module.InferInput(name, list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer(model, [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0" if name == "INPUT0" else "OUT"), data)
    finally:
        client.close()


def _counts(server: ServerProcess, model: str) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        stats = client.get_inference_statistics(model)["model_stats"][0]
    finally:
        client.close()
    counts: dict[str, Any] = {key: stats[key] for key in ("inference_count", "execution_count")}
    counts.update({key: value["count"] for key, value in stats["inference_stats"].items()})
    counts["batches"] = {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}
    return counts


def _metrics(server: ServerProcess) -> str:
    client = RawClient(server.metrics_url)
    try:
        return client.request("GET", "/metrics").body.decode()
    finally:
        client.close()


def _metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{key}="{value}"' for key, value in labels.items())
    line = f"{name}{{{wanted}}} " if labels else f"{name} "
    found = [row for row in text.splitlines() if row.startswith(line)]
    assert len(found) == 1, (line, text)
    return float(found[0].rsplit(" ", 1)[1])


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in after.items():
        if key == "batches":
            out[key] = {b: n - before[key].get(b, 0) for b, n in value.items() if n != before[key].get(b, 0)}
        else:
            out[key] = value - before[key]
    return out


# ---- 1. compression ------------------------------------------------------------------------------


def test_aio_client_reads_statistics_and_metadata(server: ServerProcess) -> None:
    """aiohttp sends ``Accept-Encoding: gzip, deflate`` on every call and tritonclient.http.aio does not
    inflate answers: Triton compresses only inference answers, so these work against it (NVIDIA's
    simple_http_aio_infer_client.py died here with ``UnicodeDecodeError ... byte 0x8b``)."""

    async def calls() -> tuple[Any, Any, Any]:
        client = aioclient.InferenceServerClient(server.http_url)
        try:
            data = np.ones((1, 3), dtype=np.float32)
            tensor = aioclient.InferInput("INPUT0", [1, 3], "FP32")
            tensor.set_data_from_numpy(data)
            result = await client.infer("ident_b", [tensor])
            return (
                await client.get_inference_statistics("ident_b"),
                await client.get_model_metadata("ident_b"),
                result.as_numpy("OUTPUT0"),
            )
        finally:
            await client.close()

    stats, metadata, output = asyncio.run(calls())
    assert stats["model_stats"][0]["name"] == "ident_b"
    assert metadata["name"] == "ident_b"
    assert output.tolist() == [[1.0, 1.0, 1.0]]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v2", None),
        ("GET", "/v2/models/ident_b", None),
        ("GET", "/v2/models/ident_b/config", None),
        ("GET", "/v2/models/ident_b/stats", None),
        ("GET", "/v2/models/stats", None),
        ("POST", "/v2/repository/index", ""),
        ("GET", "/v2/logging", None),
        ("GET", "/v2/trace/setting", None),
        ("GET", "/v2/systemsharedmemory/status", None),
        ("GET", "/v2/models/nope", None),
        ("POST", "/v2/models/nope/infer", _infer_body([1, 2])),
        ("POST", "/v2/models/ident_b/infer", "{bad"),
    ],
)
def test_only_inference_answers_are_compressed(raw: RawClient, method: str, path: str, body: str | None) -> None:
    """Triton 2.51 with ``Accept-Encoding: gzip, deflate`` (and ``deflate``, and ``gzip;q=0.5,
    deflate``): every one of these answered uncompressed, without ``Content-Encoding``."""
    for accept in ("gzip, deflate", "deflate", "gzip;q=0.5, deflate"):
        response = raw.request(method, path, body, {"Accept-Encoding": accept})
        assert "content-encoding" not in response.headers, (path, accept, response.headers)
        if response.body:
            json.loads(response.body)


@pytest.mark.parametrize(
    ("accept", "encoding"),
    [
        ("gzip, deflate", "gzip"),
        ("deflate", "deflate"),
        ("gzip;q=0.5, deflate", "deflate"),
        ("deflate;q=0.5, gzip;q=0.8", "gzip"),
        ("identity, gzip;q=0.5", None),
        ("br", None),
        ("gzip;q=abc", None),
    ],
)
def test_inference_answers_use_tritons_choice_of_encoding(raw: RawClient, accept: str, encoding: str | None) -> None:
    """Triton 2.51 weighs ``;q=`` among identity, gzip and deflate, the first highest wins:
    ``gzip;q=0.5, deflate`` came back deflate (zlib format), ``br`` and ``identity, gzip;q=0.5``
    uncompressed, ``gzip, deflate`` gzip."""
    response = raw.request("POST", "/v2/models/ident_nb/infer", _infer_body([1, 2]), {"Accept-Encoding": accept})
    assert response.status == 200
    assert response.headers.get("content-encoding") == encoding
    body = response.body
    if encoding == "gzip":
        body = gzip.decompress(body)
    elif encoding == "deflate":
        body = zlib.decompress(body)
    assert json.loads(body)["outputs"][0]["data"] == [0.0, 1.0]


# ---- 2. statistics and metrics count what Triton counts ------------------------------------------


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_batch_four_requests_count_four_inferences(server: ServerProcess, protocol: str) -> None:
    """Triton 2.51, one [4,3] request each: ``ident_b`` (batching) inference_count +4, execution_count
    +1, success +1, batch_stats {4: 1}; ``ident_nb`` (no batching, shape [4,3]) inference_count +1,
    execution_count +1, batch_stats {1: 1}; ``nv_inference_count`` / ``nv_inference_exec_count`` the
    same; over HTTP and gRPC alike."""
    seed = 1000.0 if protocol == "http" else 2000.0
    data = np.arange(12, dtype=np.float32).reshape(4, 3) + seed
    for model, inferences, batch in (("ident_b", 4, 4), ("ident_nb", 1, 1)):
        before, metrics_before = _counts(server, model), _metrics(server)
        _infer(protocol, server, model, data)
        delta, metrics_after = _delta(before, _counts(server, model)), _metrics(server)
        assert delta["inference_count"] == inferences, (model, delta)
        assert delta["execution_count"] == 1 and delta["success"] == 1 and delta["fail"] == 0
        assert delta["batches"] == {batch: 1}, (model, delta)
        for name, expected in (("nv_inference_count", inferences), ("nv_inference_exec_count", 1)):
            grew = _metric(metrics_after, name, model=model, version="1") - _metric(
                metrics_before, name, model=model, version="1"
            )
            assert grew == expected, (model, name)
        assert (
            _metric(metrics_after, "nv_inference_request_success", model=model, version="1")
            - _metric(metrics_before, "nv_inference_request_success", model=model, version="1")
            == 1
        )


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_ensembles_count_their_batches_and_steps_use_the_cache(server: ServerProcess, protocol: str) -> None:
    """Triton 2.51, a [4,3] request to the batching ensemble ``ens`` over ``ident_b`` (response cache
    on): ens inference_count +4, execution_count +1, batch_stats {4: 1}, nv_inference_count +4 and
    nv_inference_exec_count +1 for ens.  The step is answered from ident_b's cache: the same data sent
    to ``ident_b`` afterwards is a cache hit (cache_hit +1, no execution), and the step itself was a
    miss (cache_miss +1)."""
    seed = 5000.0 if protocol == "http" else 6000.0
    data = np.arange(12, dtype=np.float32).reshape(4, 3) + seed
    ens_before, step_before, metrics_before = _counts(server, "ens"), _counts(server, "ident_b"), _metrics(server)
    _infer(protocol, server, "ens", data, name="IN")
    ens, step, metrics = _delta(ens_before, _counts(server, "ens")), _counts(server, "ident_b"), _metrics(server)
    assert (ens["inference_count"], ens["execution_count"], ens["success"]) == (4, 1, 1)
    assert ens["batches"] == {4: 1}
    for name, expected in (("nv_inference_count", 4), ("nv_inference_exec_count", 1)):
        assert _metric(metrics, name, model="ens", version="1") - _metric(
            metrics_before, name, model="ens", version="1"
        ) == expected
    assert _delta(step_before, step)["cache_miss"] == 1
    _infer(protocol, server, "ident_b", data)
    again = _delta(step, _counts(server, "ident_b"))
    assert again["cache_hit"] == 1 and again["success"] == 1
    assert again["execution_count"] == 0 and again["inference_count"] == 0


# ---- 3. the response cache's own metrics ----------------------------------------------------------


def test_cache_gauges_have_tritons_names_types_and_no_labels(server: ServerProcess) -> None:
    """Triton 2.51 with ``--cache-config local,size=N`` exposes these gauges, without labels, next to
    the per-model ``nv_cache_*_per_model`` counters; ``nv_cache_num_lookups`` is hits + misses."""
    data = np.full((1, 5), 7.25, dtype=np.float32)
    before = _metrics(server)
    _infer("http", server, "ident_b", data)
    _infer("http", server, "ident_b", data)
    text = _metrics(server)
    families = {
        "nv_cache_util": "Cache utilization [0.0 - 1.0]",
        "nv_cache_num_entries": "Number of responses stored in response cache",
        "nv_cache_num_hits": "Number of cache hits in response cache",
        "nv_cache_num_misses": "Number of cache misses in response cache",
        "nv_cache_num_lookups": "Number of cache lookups in response cache",
        "nv_cache_num_evictions": "Number of cache evictions in response cache",
        "nv_cache_lookup_duration": "Total cache lookup duration (hit and miss), in microseconds",
        "nv_cache_insertion_duration": "Total cache insertion duration, in microseconds",
    }
    for name, doc in families.items():
        assert f"# HELP {name} {doc}\n# TYPE {name} gauge\n" in text, name
    grew = {name: _metric(text, name) - _metric(before, name) for name in families}
    assert grew["nv_cache_num_hits"] == 1 and grew["nv_cache_num_misses"] == 1
    assert grew["nv_cache_num_lookups"] == 2 and grew["nv_cache_num_entries"] == 1
    assert grew["nv_cache_num_evictions"] == 0
    assert 0 < _metric(text, "nv_cache_util") < 1
    assert _metric(text, "nv_cache_num_lookups") == _metric(text, "nv_cache_num_hits") + _metric(
        text, "nv_cache_num_misses"
    )


def test_summaries_count_as_tritons_with_the_cache(server: ServerProcess) -> None:
    """Triton 2.51 with ``summary_latencies=true`` and the cache: a model using the cache has no
    ``nv_inference_request_summary_us`` series; its compute summaries leave cache hits out (count 1
    after a miss and a hit) while the queue summary counts both; the compute summaries' help texts say
    "Cumulative"; ``nv_cache_{hit,miss}_summary_per_model`` are declared without series; the pinned
    memory pool gauges are there."""
    data = np.full((1, 3), 3.5, dtype=np.float32)
    before = _metrics(server)
    _infer("http", server, "ident_b", data)
    _infer("http", server, "ident_b", data)
    text = _metrics(server)
    assert 'nv_inference_request_summary_us_count{model="ident_b"' not in text
    assert 'nv_inference_request_summary_us_count{model="ident_nb",version="1"}' in text
    for name, grew in (("nv_inference_queue_summary_us_count", 2), ("nv_inference_compute_infer_summary_us_count", 1)):
        assert _metric(text, name, model="ident_b", version="1") - _metric(before, name, model="ident_b", version="1") == grew
    assert (
        "# HELP nv_inference_compute_input_summary_us Cumulative compute input duration in microseconds "
        "(does not include cached requests)\n" in text
    )
    for outcome in ("hit", "miss"):
        name = f"nv_cache_{outcome}_summary_per_model"
        assert f"# TYPE {name} summary\n" in text and f"\n{name}" not in text.replace(f"# TYPE {name}", "")
    for name in ("nv_pinned_memory_pool_total_bytes", "nv_pinned_memory_pool_used_bytes"):
        assert f"# TYPE {name} gauge\n{name} 0\n" in text


# ---- 4. verbose logging per request and per execution --------------------------------------------

_DEFAULT_LINE = r"I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ [\w.]+:\d+\] "
_ISO_LINE = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ [\w.]+:\d+\] "


@pytest.mark.parametrize(("log_format", "prefix"), [("default", _DEFAULT_LINE), ("ISO8601", _ISO_LINE)])
def test_verbose_logs_each_request_and_execution(
    server: ServerProcess, raw: RawClient, log_format: str, prefix: str
) -> None:
    """Triton 2.51 at ``--log-verbose 1`` logged, per HTTP inference (values of this request):
    ``HTTP request: 2 /v2/models/ident_nb/infer``, ``[request id: fid-1] prepared: request id: fid-1,
    model: ident_nb, requested version: -1, actual version: 1, flags: 0x0, correlation id: 0, batch
    size: 0, priority: 0, timeout (us): 0`` (then the inputs and outputs), ``model ident_nb, instance
    ident_nb_0, executing 1 requests``, ``add response output: output: OUTPUT0, type: FP32, shape:
    [1,2]`` and ``TRITONBACKEND_ModelInstanceExecute: model instance name ident_nb_0 released 1
    requests``; per gRPC inference ``New request handler for ModelInferHandler, N`` and ``Process for
    ModelInferHandler, rpc_ok=1, N step START``; a batching model's request of batch 4 says ``batch
    size: 4``.  Each line in the format in force."""
    assert raw.post_json("/v2/logging", {"log_format": log_format}).status == 200
    try:
        tag = f"fid-{log_format}"
        response = raw.request("POST", "/v2/models/ident_nb/infer", _infer_body([1, 2], id=tag))
        assert response.status == 200
        _infer("grpc", server, "ident_b", np.arange(8, dtype=np.float32).reshape(4, 2) + 31.5)
        log = server.log()
        expected = [
            r'"HTTP request: 2 /v2/models/ident_nb/infer"',
            rf'"\[request id: {tag}\] prepared: request id: {tag}, model: ident_nb, requested version: -1, '
            r"actual version: 1, flags: 0x0, correlation id: 0, batch size: 0, priority: 0, timeout \(us\): 0\\n",
            r'"model ident_nb, instance ident_nb_0, executing 1 requests"',
            r'"add response output: output: OUTPUT0, type: FP32, shape: \[1,2\]"',
            r'"TRITONBACKEND_ModelInstanceExecute: model instance name ident_nb_0 released 1 requests"',
            r'"New request handler for ModelInferHandler, \d+"',
            r'"Process for ModelInferHandler, rpc_ok=1, \d+ step START"',
            r'"\[request id: <id_unknown>\] prepared: request id: , model: ident_b, requested version: -1, '
            r"actual version: 1, flags: 0x0, correlation id: 0, batch size: 4,",
        ]
        for pattern in expected:
            assert re.search(rf"^{prefix}{pattern}", log, re.MULTILINE), pattern
    finally:
        raw.post_json("/v2/logging", {"log_format": "default"})


def test_no_inference_lines_without_verbose(server: ServerProcess, raw: RawClient) -> None:
    """Triton 2.51 at ``log_verbose_level`` 0 logs nothing per inference."""
    assert raw.post_json("/v2/logging", {"log_verbose_level": 0}).status == 200
    try:
        before = server.log().count("HTTP request: 2 /v2/models/ident_nb/infer")
        assert raw.request("POST", "/v2/models/ident_nb/infer", _infer_body([1, 2], id="quiet")).status == 200
        log = server.log()
        assert log.count("HTTP request: 2 /v2/models/ident_nb/infer") == before
        assert "prepared: request id: quiet" not in log
    finally:
        raw.post_json("/v2/logging", {"log_verbose_level": 1})


# ---- 6. binary_data per output ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_parameters", [{}, {"binary_data_output": True}, {"binary_data_output": False}]
)
@pytest.mark.parametrize("output_parameters", [{"binary_data": False}, {}])
def test_listed_outputs_follow_their_own_binary_data(
    raw: RawClient, request_parameters: dict[str, Any], output_parameters: dict[str, Any]
) -> None:
    """Triton 2.51: an output listed in ``outputs`` is binary only when its own ``binary_data`` is
    true; with ``binary_data: false`` or no parameter it answered plain ``application/json``, even
    with ``"parameters": {"binary_data_output": true}`` (which only sets the default for outputs the
    request does not list)."""
    body = _infer_body(
        [1, 2], outputs=[{"name": "OUTPUT0", "parameters": output_parameters}], parameters=request_parameters
    )
    response = raw.request("POST", "/v2/models/ident_nb/infer", body)
    assert response.status == 200
    assert response.headers["content-type"] == "application/json"
    assert "inference-header-content-length" not in response.headers
    assert response.json()["outputs"][0]["data"] == [0.0, 1.0]


def test_binary_data_output_still_sets_the_default_for_unlisted_outputs(raw: RawClient) -> None:
    """Triton 2.51: ``binary_data_output: true`` with no ``outputs`` answers every output binary."""
    response = raw.request("POST", "/v2/models/ident_nb/infer", _infer_body([1, 2], parameters={"binary_data_output": True}))
    assert response.status == 200 and response.headers["content-type"] == "application/octet-stream"
    header_length = int(response.headers["inference-header-content-length"])
    assert json.loads(response.body[:header_length])["outputs"][0]["parameters"] == {"binary_data_size": 8}


# ---- 7. shapes of rank > 64 ------------------------------------------------------------------------


@pytest.mark.parametrize("rank", [65, 100])
@pytest.mark.parametrize("model", ["ident_nb", "ident_b"])
def test_a_rank_beyond_numpys_gets_the_models_shape_error(raw: RawClient, rank: int, model: str) -> None:
    """Triton 2.51: 400 ``[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model
    'ident_nb'. Expected [-1,-1], got [1,1,...]. `` (for the batching model the same with its
    ``Expected [-1,-1]`` and the max_batch_size NOTE), whatever the rank."""
    shape = [1] * rank
    response = raw.request("POST", f"/v2/models/{model}/infer", _infer_body(shape))
    assert response.status == 400, response.body
    got = "[" + ",".join(["1"] * rank) + "]"
    assert response.error.startswith(
        f"[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model '{model}'. "
        f"Expected [-1,-1], got {got}. "
    )


@pytest.mark.parametrize("rank", [65, 100])
def test_a_rank_beyond_numpys_over_grpc(server: ServerProcess, rank: int) -> None:
    """Over gRPC, Triton answers INVALID_ARGUMENT with the same message."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        tensor = grpcclient.InferInput("INPUT0", [1] * rank, "FP32")
        tensor._raw_content = np.ones(1, dtype=np.float32).tobytes()
        with pytest.raises(InferenceServerException) as caught:
            client.infer("ident_nb", [tensor])
    finally:
        client.close()
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unexpected shape for input 'INPUT0' for model 'ident_nb'. Expected [-1,-1]" in caught.value.message()


# ---- 8. no route for a trailing slash ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v2/models/ident_nb/infer/"),
        ("POST", "/v2/models/ident_nb/versions/1/infer/"),
        ("POST", "//v2/models/ident_nb/infer"),
        ("POST", "/v2//models/ident_nb/infer"),
        ("GET", "/v2/models/ident_nb/"),
        ("GET", "/v2/models/ident_nb/ready/"),
        ("GET", "/v2/health/ready/"),
        ("GET", "/v2/"),
    ],
)
def test_paths_with_an_empty_segment_are_not_routed(raw: RawClient, method: str, path: str) -> None:
    """Triton 2.51 answered each of these 404 ``{"error":"Not Found"}`` (it ran no inference)."""
    response = raw.request(method, path, _infer_body([1, 2]) if method == "POST" else None)
    assert (response.status, response.error) == (404, "Not Found")


# ---- 9. string sequence IDs longer than 128 bytes ---------------------------------------------------


@pytest.mark.parametrize("model", ["seq_str", "ident_b"])
@pytest.mark.parametrize("sequence_id", ["s" * 129, "é" * 65])
def test_a_long_string_correlation_id_is_unsupported(raw: RawClient, model: str, sequence_id: str) -> None:
    """Triton 2.51: 501 ``string correlation ID cannot be longer than 128 characters``, for a sequence
    model and for any other, counting bytes (65 two-byte characters are refused)."""
    body = json.dumps(
        {
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1]}],
            "parameters": {"sequence_id": sequence_id, "sequence_start": True, "sequence_end": True},
        }
    )
    response = raw.request("POST", f"/v2/models/{model}/infer", body)
    assert (response.status, response.error) == (501, "string correlation ID cannot be longer than 128 characters")


def test_a_long_string_correlation_id_over_grpc(server: ServerProcess) -> None:
    """Triton 2.51 over gRPC: UNIMPLEMENTED with the same message; 128 bytes are accepted."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        tensor = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 1), dtype=np.float32))
        with pytest.raises(InferenceServerException) as caught:
            client.infer("seq_str", [tensor], sequence_id="s" * 129, sequence_start=True, sequence_end=True)
        assert caught.value.status() == "StatusCode.UNIMPLEMENTED"
        assert caught.value.message() == "string correlation ID cannot be longer than 128 characters"
        result = client.infer("seq_str", [tensor], sequence_id="s" * 128, sequence_start=True, sequence_end=True)
        assert result.as_numpy("OUTPUT0").tolist() == [[1.0]]
    finally:
        client.close()
