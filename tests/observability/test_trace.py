"""The trace extension: settings over HTTP and gRPC, Triton's trace file, and OTLP export of spans."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.scheduling.models import wait_for
from tests.support.http import RawClient
from tests.support.server import ServerProcess

#: Triton's timestamps of one request inside the server, in the order they happen.
CORE = [
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "INFER_RESPONSE_COMPLETE",
    "REQUEST_END",
]
FRONTEND = {
    "HTTP": ("HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END"),
    "GRPC": ("GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "GRPC_SEND_START", "GRPC_SEND_END"),
}
ADD_SUB = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
    ]
}
OFF = {"trace_level": ["OFF"], "trace_rate": None, "trace_count": None, "log_frequency": None}


def _timestamps(records: list[dict[str, Any]], trace_id: int) -> dict[str, int]:
    return {
        r["timestamps"][0]["name"]: r["timestamps"][0]["ns"]
        for r in records
        if r["id"] == trace_id and "timestamps" in r
    }


def _in_order(stamps: dict[str, int], protocol: str) -> None:
    """Every point of the request once, in Triton's order, at non-decreasing times."""
    receive_start, receive_end, send_start, send_end = FRONTEND[protocol]
    assert list(stamps) == [receive_start, receive_end, *CORE, send_start, send_end]
    assert list(stamps.values()) == sorted(stamps.values())


def _indexed(trace_file: Path) -> list[Path]:
    """The ``log_frequency`` files, ``<trace_file>.<index>``, by index."""
    return sorted(trace_file.parent.glob(trace_file.name + ".*"), key=lambda path: int(path.suffix[1:]))


def test_a_sampled_request_leaves_its_timestamps_in_the_trace_file(
    server: ServerProcess, client: RawClient, trace_file: Path
) -> None:
    """With frontend workers too: sampling and the trace file are the server's (the engine's), not each
    worker's, so the third request is not traced whichever worker serves it."""
    update = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "log_frequency": "1", "trace_count": "2"}
    settings = client.post_json("/v2/trace/setting", update).json()
    assert settings == {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "1",
        "trace_count": "2",
        "log_frequency": "1",
        "trace_file": str(trace_file),
        "trace_mode": "triton",
    }
    before = len(_indexed(trace_file))
    try:
        assert client.post_json("/v2/models/add_sub/infer", {"id": "http-1", **ADD_SUB}).status == 200
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            inputs = [grpcclient.InferInput(f"INPUT{i}", [4], "FP32") for i in range(2)]
            for tensor in inputs:
                tensor.set_data_from_numpy(np.ones(4, dtype=np.float32))
            grpc.infer("add_sub", inputs, request_id="grpc-1")
            grpc.infer("add_sub", inputs, request_id="untraced")  # trace_count is used up by then
        finally:
            grpc.close()
        assert client.request("GET", "/v2/trace/setting").json()["trace_count"] == "0"
        # With workers, a trace reaches the engine's file after its response reached the client.
        wait_for(lambda: len(_indexed(trace_file)) >= before + 2)
        index = _indexed(trace_file)
        http = json.loads(index[-2].read_text())
        grpc_records = json.loads(index[-1].read_text())
    finally:
        client.post_json("/v2/trace/setting", OFF)
    (header,) = [r for r in http if "model_name" in r]
    assert header == {"id": header["id"], "model_name": "add_sub", "model_version": 1, "request_id": "http-1"}
    _in_order(_timestamps(http, header["id"]), "HTTP")
    (header,) = [r for r in grpc_records if "model_name" in r]
    assert header["request_id"] == "grpc-1"
    _in_order(_timestamps(grpc_records, header["id"]), "GRPC")
    assert "untraced" not in json.dumps(grpc_records)


def test_model_settings_override_and_clear(server: ServerProcess, client: RawClient) -> None:
    try:
        model = client.post_json("/v2/models/add_sub/trace/setting", {"trace_rate": "7"}).json()
        assert (model["trace_rate"], model["trace_level"]) == ("7", ["OFF"])
        client.post_json("/v2/trace/setting", {"trace_rate": "3"})
        assert client.request("GET", "/v2/models/add_sub/trace/setting").json()["trace_rate"] == "7"
        assert client.request("GET", "/v2/models/plain/trace/setting").json()["trace_rate"] == "3"
        cleared = client.post_json("/v2/models/add_sub/trace/setting", {"trace_rate": None}).json()
        assert cleared["trace_rate"] == "3"
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            answer = grpc.update_trace_settings("add_sub", {"trace_count": "5"}, as_json=True)
            assert answer["settings"]["trace_count"] == {"value": ["5"]}
            assert grpc.get_trace_settings(as_json=True)["settings"]["trace_count"] == {"value": ["-1"]}
            answer = grpc.update_trace_settings("add_sub", {"trace_count": None}, as_json=True)
            assert answer["settings"]["trace_count"] == {"value": ["-1"]}
        finally:
            grpc.close()
    finally:
        client.post_json("/v2/trace/setting", OFF)
    for path, body, status, message in (
        (
            "/v2/trace/setting",
            {"trace_file": "/x"},
            501,
            "trace file location can not be updated through network protocol",
        ),
        ("/v2/trace/setting", {"trace_rate": "abc"}, 400, "Unable to parse 'trace_rate', got: abc"),
        ("/v2/trace/setting", {"trace_rate": 5}, 400, "attempt to access JSON non-string as string"),
        ("/v2/models/nope/trace/setting", {}, 400, "Request for unknown model : nope"),
    ):
        response = client.post_json(path, body)
        assert (response.status, response.error) == (status, message)
    assert client.request("GET", "/v2/models/add_sub/versions/1/trace/setting").status == 404
    assert client.request("GET", "/v2/trace/setting").json()["trace_rate"] == "1000"


class _Collector(ThreadingHTTPServer):
    """A tiny OTLP/HTTP receiver: keeps every span of every export request."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Receive)
        self.spans: list[Any] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"


class _Receive(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        export = ExportTraceServiceRequest()
        export.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
        assert isinstance(self.server, _Collector)
        for resource in export.resource_spans:
            for scope in resource.scope_spans:
                self.server.spans += scope.spans
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[_Collector]:
    """One per test, so per server mode: a module's collector would hold the other mode's spans."""
    receiver = _Collector()
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    yield receiver
    receiver.shutdown()
    receiver.server_close()


def test_opentelemetry_mode_exports_frontend_model_queue_and_compute_spans(
    repo: Path, collector: _Collector, frontend_workers: int
) -> None:
    args = [
        "--trace-config=mode=opentelemetry",
        f"--trace-config=opentelemetry,url={collector.url}",
        "--trace-config=opentelemetry,bsp_schedule_delay=50",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
    ]
    caller = "0af7651916cd43dd8448eb211c80319c"
    with ServerProcess([repo], args, frontend_workers=frontend_workers) as server:
        client = RawClient(server.http_url)
        try:
            assert client.post_json("/v2/models/add_sub/infer", {"id": "otel-1", **ADD_SUB}).status == 200
            parent = {"traceparent": f"00-{caller}-b7ad6b7169203331-01"}
            assert client.post_json("/v2/models/add_sub/infer", ADD_SUB, parent).status == 200
            assert client.request("GET", "/v2/trace/setting").json()["trace_mode"] == "opentelemetry"
        finally:
            client.close()
        wait_for(lambda: len(collector.spans) >= 8)
    by_trace: dict[bytes, dict[str, Any]] = {}
    for span in collector.spans:
        by_trace.setdefault(span.trace_id, {})[span.name] = span
    assert len(by_trace) == 2 and bytes.fromhex(caller) in by_trace
    for spans in by_trace.values():
        assert set(spans) == {"InferRequest", "add_sub", "queue", "compute"}
        root, model = spans["InferRequest"], spans["add_sub"]
        assert model.parent_span_id == root.span_id
        assert spans["queue"].parent_span_id == spans["compute"].parent_span_id == model.span_id
        assert spans["queue"].end_time_unix_nano == spans["compute"].start_time_unix_nano
        assert root.start_time_unix_nano <= model.start_time_unix_nano <= model.end_time_unix_nano
        assert [event.name for event in root.events] == [
            "HTTP_RECV_START",
            "HTTP_RECV_END",
            "HTTP_SEND_START",
            "HTTP_SEND_END",
        ]
        assert [event.name for event in spans["compute"].events] == [
            "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"
        ]  # fmt: skip
        attributes = {a.key: a.value for a in model.attributes}
        assert attributes["triton.model_name"].string_value == "add_sub"
        assert attributes["triton.model_version"].int_value == 1
    continued = by_trace[bytes.fromhex(caller)]["InferRequest"]
    assert continued.parent_span_id == bytes.fromhex("b7ad6b7169203331")
    first = next(spans for trace_id, spans in by_trace.items() if trace_id != bytes.fromhex(caller))
    request_ids = {a.key: a.value.string_value for a in first["add_sub"].attributes}
    assert request_ids["triton.request_id"] == "otel-1"
