"""The logging extension: settings read and changed over HTTP and gRPC, and the log changing with them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from tests.scheduling.models import wait_for
from tests.support.http import RawClient
from tests.support.models import write_model
from tests.support.server import ServerProcess

DEFAULTS = {
    "log_file": "",
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}


def _chat(client: RawClient, tag: str) -> None:
    body = {"id": tag, "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": [1]}]}
    assert client.post_json("/v2/models/chatty/infer", body).status == 200


def _lines(server: ServerProcess, tag: str) -> list[str]:
    """The model's own lines (through ``pb_utils.Logger``) about request ``tag``, not the server's
    (``prepared``, ``Setting state``), which name the request too at verbose level 1."""
    return [line for line in server.log().splitlines() if tag in line and "[request id: " not in line]


def test_settings_change_what_the_server_logs_at_once(server: ServerProcess, client: RawClient) -> None:
    assert client.request("GET", "/v2/logging").json() == DEFAULTS
    _chat(client, "first")
    wait_for(lambda: len(_lines(server, "first")) == 2)
    info, warning = _lines(server, "first")
    assert re.fullmatch(r'I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ pb_utils\.py:\d+\] "info first"', info)
    assert warning.startswith("W") and warning.endswith('"warning first"')

    changed = client.post_json("/v2/logging", {"log_verbose_level": 1, "log_info": False, "log_format": "ISO8601"})
    assert changed.json() == {**DEFAULTS, "log_verbose_level": 1, "log_info": False, "log_format": "ISO8601"}
    _chat(client, "second")
    wait_for(lambda: len(_lines(server, "second")) == 2)
    verbose, warning = _lines(server, "second")  # info lines are gone, verbose ones appear
    assert re.fullmatch(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ pb_utils\.py:\d+\] "verbose second"', verbose)
    assert warning.endswith('"warning second"')

    reset = {key: value for key, value in DEFAULTS.items() if key != "log_file"}
    assert client.post_json("/v2/logging", reset | {"log_format": "json"}).status == 200
    _chat(client, "third")
    wait_for(lambda: len(_lines(server, "third")) == 2)
    assert '"message":"info third"' in _lines(server, "third")[0]
    assert client.post_json("/v2/logging", reset).json() == DEFAULTS


def test_bad_updates_are_refused_with_tritons_messages(client: RawClient) -> None:
    for body, status, message in (
        ({"log_file": "/tmp/x.log"}, 501, "log file location can not be updated through network protocol"),
        ({"log_format": "xml"}, 400, "invalid argument for log_format, got: xml"),
        ({"log_info": "true"}, 400, "attempt to access JSON non-boolean as boolean"),
        ({"log_verbose_level": -1}, 400, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
    ):
        response = client.post_json("/v2/logging", body)
        assert (response.status, response.error) == (status, message)
    assert client.request("POST", "/v2/logging", "{").status == 400
    assert client.request("PUT", "/v2/logging").status == 405
    assert client.request("GET", "/v2/logging").json() == DEFAULTS


def test_grpc_log_settings(server: ServerProcess) -> None:
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert grpc.get_log_settings(as_json=True)["settings"]["log_format"] == {"string_param": "default"}
        updated = grpc.update_log_settings({"log_verbose_level": 2, "log_warning": False}, as_json=True)
        assert updated["settings"]["log_verbose_level"] == {"uint32_param": 2}
        assert updated["settings"]["log_warning"] == {"bool_param": False}
        with pytest.raises(grpcclient.InferenceServerException) as error:
            grpc.update_log_settings({"log_file": "/tmp/x"})
        assert error.value.status() == "StatusCode.UNIMPLEMENTED"
        # a value of another kind (here none: tritonclient sends None so), in Triton's gRPC words
        for setting, kind in (("log_info", "boolean"), ("log_verbose_level", "int32"), ("log_format", "string")):
            with pytest.raises(grpcclient.InferenceServerException) as error:
                grpc.update_log_settings({setting: None})
            assert (error.value.status(), error.value.message()) == (
                "StatusCode.INVALID_ARGUMENT",
                f"expect {kind} for '{setting}'",
            )
        restored = grpc.update_log_settings({"log_verbose_level": 0, "log_warning": True}, as_json=True)
        assert restored["settings"]["log_warning"] == {"bool_param": True}
    finally:
        grpc.close()


#: Logs one line at each level in ``initialize``, ``execute`` and ``finalize``.
LIFELONG_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


def _all(stage):
    pb_utils.Logger.log_info(stage + "-info")
    pb_utils.Logger.log_warn(stage + "-warning")
    pb_utils.Logger.log_error(stage + "-error")
    pb_utils.Logger.log_verbose(stage + "-verbose")


class TritonPythonModel:
    def initialize(self, args):
        _all("initialize")

    def execute(self, requests):
        _all("execute")
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([1], np.int32))]) for _ in requests]

    def finalize(self):
        _all("finalize")
"""


LIFELONG_CONFIG = """
name: "lifelong"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def test_a_model_process_logs_to_its_end_under_the_settings_of_the_moment(tmp_path: Path) -> None:
    """As NVIDIA's qa ``L0_backend_python/logging`` counts them: ``finalize()``'s lines, written as the
    server stops, reach its log too; verbose lines appear once verbose logging is turned on."""
    repo = tmp_path / "repo"
    write_model(repo, "lifelong", LIFELONG_CONFIG, LIFELONG_PY)
    with ServerProcess([repo]) as server:
        client = RawClient(server.http_url)
        assert client.post_json("/v2/logging", {"log_verbose_level": 1}).status == 200
        body = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": [1]}]}
        assert client.post_json("/v2/models/lifelong/infer", body).status == 200
        client.close()
        assert server.stop() == 0
        log = server.log()
    for stage in ("initialize", "execute", "finalize"):
        for level in ("info", "warning", "error"):
            assert log.count(f"{stage}-{level}") == 1, (stage, level, log[-3000:])
    assert log.count("initialize-verbose") == 0  # (before verbose logging was on)
    assert log.count("execute-verbose") == log.count("finalize-verbose") == 1
