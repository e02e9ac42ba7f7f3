"""Trace settings as Triton's trace extension treats them, and ``--trace-config`` parsing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from naiad.core.errors import InvalidArgumentError, UnsupportedError
from naiad.core.request import InferRequest, InferResponse, Tensor
from naiad.tracing.config import DEFAULT_OTLP_URL, TraceConfig, parse_trace_config
from naiad.tracing.tracer import Tracer


def test_trace_config_takes_tritonservers_flags() -> None:
    config = parse_trace_config(
        [
            "triton,file=/tmp/t.json",
            "triton,log-frequency=50",
            "rate=100",
            "level=TIMESTAMPS",
            "level=TENSORS",
            "count=10",
            "opentelemetry,resource=service.name=pods",
            "opentelemetry,bsp_schedule_delay=100",
        ]
    )
    assert (config.file, config.log_frequency, config.rate, config.count) == ("/tmp/t.json", 50, 100, 10)
    assert config.level == ("TIMESTAMPS", "TENSORS") and config.mode == "triton"
    assert config.opentelemetry.url == DEFAULT_OTLP_URL
    assert config.opentelemetry.resource == {"service.name": "pods"}
    assert config.opentelemetry.bsp_schedule_delay_ms == 100
    assert parse_trace_config([]) == TraceConfig()
    for bad in ("level=LOUD", "mode=zipkin", "rate=x", "count=-2", "triton,bogus=1", "rate"):
        with pytest.raises(ValueError):
            parse_trace_config([bad])


@pytest.fixture
def tracer(tmp_path: Path) -> Tracer:
    return Tracer(parse_trace_config([f"triton,file={tmp_path / 'trace.json'}"]))


def test_settings_report_tritons_defaults_as_strings(tracer: Tracer, tmp_path: Path) -> None:
    assert tracer.settings() == {
        "trace_level": ["OFF"],
        "trace_rate": "1000",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_file": str(tmp_path / "trace.json"),
        "trace_mode": "triton",
    }
    assert not tracer.enabled and tracer.begin("m", "HTTP") is None


def test_model_settings_override_some_keys_and_follow_the_global_rest(tracer: Tracer) -> None:
    tracer.update("m", {"trace_rate": ["5"]})
    tracer.update("", {"trace_level": ["TIMESTAMPS"], "trace_count": ["7"]})
    assert tracer.enabled
    model = tracer.settings("m")
    assert (model["trace_rate"], model["trace_level"], model["trace_count"]) == ("5", ["TIMESTAMPS"], "7")
    assert tracer.settings("other")["trace_rate"] == "1000"
    tracer.update("m", {"trace_rate": None})  # cleared: the model follows the global setting again
    assert tracer.settings("m") == tracer.settings()
    tracer.update("", {"trace_count": None, "trace_level": None})  # back to --trace-config values
    assert (tracer.settings()["trace_count"], tracer.settings()["trace_level"]) == ("-1", ["OFF"])
    assert not tracer.enabled


def test_updates_are_checked_as_triton_checks_them(tracer: Tracer) -> None:
    with pytest.raises(UnsupportedError, match="trace file location can not be updated"):
        tracer.update("", {"trace_file": ["/x"]})
    with pytest.raises(InvalidArgumentError, match="Unable to parse 'trace_rate', got: abc"):
        tracer.update("", {"trace_rate": ["abc"]})
    with pytest.raises(InvalidArgumentError, match="Expecting value >= -1, got:-5"):
        tracer.update("", {"trace_count": ["-5"]})
    for key, limits in (("trace_count", "-1, 2147483647"), ("trace_rate", "0, 4294967295"), ("log_frequency", "0, 4294967295")):
        message = f"Unable to parse '{key}', value is out of range [ {limits} ], got: 10000000000"
        with pytest.raises(InvalidArgumentError, match=re.escape(message)):
            tracer.update("m", {key: ["10000000000"]})
    tracer.update("", {"trace_rate": ["2147483647"]})  # the largest a C int holds
    assert tracer.settings()["trace_rate"] == "2147483647"
    with pytest.raises(InvalidArgumentError, match="Expect only one trace level 'OFF'"):
        tracer.update("", {"trace_level": ["OFF", "TIMESTAMPS"]})
    with pytest.raises(InvalidArgumentError, match="sample rate must be non-zero"):
        tracer.update("", {"trace_level": ["TIMESTAMPS"], "trace_rate": ["0"]})
    tracer.update("", {"trace_level": ["LOUD"]})  # unknown levels are ignored, as in Triton
    assert tracer.settings()["trace_level"] == ["OFF"]
    with pytest.raises(InvalidArgumentError, match="trace file name is not given"):
        Tracer().update("", {"trace_level": ["TIMESTAMPS"]})


def _request_and_response() -> tuple[InferRequest, InferResponse]:
    data = np.array([[1.5, 2.0]], dtype=np.float32)
    request = InferRequest("m", id="r", inputs=[Tensor("IN", "FP32", data)])
    text = np.array([b"a b"], dtype=np.object_)
    return request, InferResponse("m", "3", outputs=[Tensor("OUT", "BYTES", text)])


def test_rate_count_and_log_frequency_decide_what_is_written_where(tracer: Tracer, tmp_path: Path) -> None:
    tracer.update("", {"trace_level": ["TIMESTAMPS", "TENSORS"], "trace_rate": ["2"], "trace_count": ["2"]})
    tracer.update("", {"log_frequency": ["1"]})
    traced = []
    for _ in range(6):
        trace = tracer.begin("m", "HTTP")
        if trace is not None:
            request, response = _request_and_response()
            trace.received(request)
            trace.answered(response)
            trace.sending()
            tracer.end(trace)
            traced.append(trace.id)
    assert traced == [1, 2] and tracer.settings()["trace_count"] == "0"  # every 2nd request, twice
    first = json.loads((tmp_path / "trace.json.0").read_text())
    at = next(i for i, record in enumerate(first) if "model_name" in record)  # as Triton: before REQUEST_START
    assert first[at] == {"id": 1, "model_name": "m", "model_version": 3, "request_id": "r"}
    assert first[at + 1]["timestamps"][0]["name"] == "REQUEST_START"
    names = [record["timestamps"][0]["name"] for record in first if "timestamps" in record]
    assert names[0] == "HTTP_RECV_START" and names[-1] == "HTTP_SEND_END" and "REQUEST_END" in names
    tensors = [record for record in first if "activity" in record]
    assert tensors == [
        {"id": 1, "activity": "TENSOR_QUEUE_INPUT",
         "tensor": {"name": "IN", "data": "1.5,2", "shape": "1,2", "dtype": "FP32"}},
        {"id": 1, "activity": "TENSOR_BACKEND_OUTPUT",
         "tensor": {"name": "OUT", "data": '"a b"', "shape": "1", "dtype": "BYTES"}},
    ]  # fmt: skip
    assert json.loads((tmp_path / "trace.json.1").read_text())[0]["id"] == 2
    tracer.close()
    assert not (tmp_path / "trace.json").exists()


def test_without_log_frequency_traces_are_appended_to_the_file_at_exit(tracer: Tracer, tmp_path: Path) -> None:
    tracer.update("", {"trace_level": ["TIMESTAMPS"], "trace_rate": ["1"]})
    for _ in range(2):
        trace = tracer.begin("m", "GRPC")
        assert trace is not None
        trace.sending()
        tracer.end(trace)
    assert not (tmp_path / "trace.json").exists()
    tracer.close()
    records = json.loads((tmp_path / "trace.json").read_text())
    assert [r["timestamps"][0]["name"] for r in records if r["id"] == 2 and "timestamps" in r] == [
        "GRPC_WAITREAD_START",
        "GRPC_SEND_START",
        "GRPC_SEND_END",
    ]
