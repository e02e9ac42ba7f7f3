"""The server's own lines are tritonserver's: what it says as it starts, serves a request at
``--log-verbose 1`` and stops, and what it leaves out (the libraries' debug chatter); the ``tritonserver``
command that starts it under Triton's name."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException

from tests.support.models import write_model
from tests.support.server import EXAMPLES, ServerProcess, exit_lines, in_order

#: A model whose config names no backend and no file: the server-side autofill finds both.
BARE = """
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

IDENTITY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""

#: tritonserver's default record: level, date, time, pid, file:line], message.
RECORD = re.compile(r"^[IWE]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ [\w.]+:\d+\] (?P<message>.*)$")


def _messages(log: str) -> list[str]:
    return [match["message"] for line in log.splitlines() if (match := RECORD.match(line))]


def _table(log: str, header: str) -> dict[str, str]:
    """The rows of the boxed table whose header row starts with ``| <header>``."""
    lines = log.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} "))
    rows = {}
    for line in lines[start + 2 :]:
        if line.startswith("+"):
            break
        key, value = (cell.strip() for cell in line.strip("|").split("|"))
        rows[key] = value
    return rows


def _infer(server: ServerProcess, model: str, request_id: str) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        tensor = httpclient.InferInput("INPUT0", [1], "INT32")
        tensor.set_data_from_numpy(np.array([7], dtype=np.int32))
        answer = client.infer(model, [tensor], request_id=request_id)
        assert answer.as_numpy("OUTPUT0").tolist() == [7]
    finally:
        client.close()


def _refused(server: ServerProcess, model: str, input_name: str, request_id: str) -> None:
    """An inference the server refuses, over HTTP and gRPC (ids ``<id>-http`` and ``<id>-grpc``)."""
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for client, module, protocol in ((http, httpclient, "http"), (grpc, grpcclient, "grpc")):
            tensor = module.InferInput(input_name, [1], "INT32")
            tensor.set_data_from_numpy(np.array([7], dtype=np.int32))
            with pytest.raises(InferenceServerException):
                client.infer(model, [tensor], request_id=f"{request_id}-{protocol}")
    finally:
        http.close()
        grpc.close()


def test_start_request_and_stop_lines(tmp_path: Path, frontend_workers: int) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "bare", BARE, IDENTITY_PY)
    server = ServerProcess([repo], ["--log-verbose=1"], frontend_workers=frontend_workers)
    with server:
        _infer(server, "bare", "tagged")
        _refused(server, "nope", "INPUT0", "unknown")
        _refused(server, "bare", "WRONG", "wrong")
        assert server.logged('"[request id: tagged] Setting state from EXECUTING to RELEASED"')
        assert server.stop() == 0
        log = server.log()
    messages = _messages(log)

    for line in (
        f'"Started GRPCInferenceService at 127.0.0.1:{server.grpc_port}"',
        f'"Started HTTPService at 127.0.0.1:{server.http_port}"',
        f'"Started Metrics Service at 127.0.0.1:{server.metrics_port}"',
    ):
        assert messages.count(line) == 1, log

    # the config after the server-side autofill: a quoted heading, then the text format as it is
    heading = messages.index('"Server side auto-completed config: "')
    body = log.split('"Server side auto-completed config: "\n', 1)[1].split("\n\n", 1)[0]
    config = text_format.Parse(body, mc.ModelConfig())
    assert (config.backend, config.default_model_filename) == ("python", "model.py")
    assert heading < messages.index('"loading: bare:1"')

    options = _table(log, "Option")
    assert options["server_id"] == "triton"
    assert options["server_version"] == "2.51.0"
    assert options["model_repository_path[0]"] == str(repo)
    assert options["model_control_mode"] == "MODE_NONE"
    assert (options["strict_readiness"], options["exit_timeout"], options["rate_limit"]) == ("1", "30", "OFF")
    assert options["frontend_workers"] == str(frontend_workers)
    assert "logging" in options["server_extensions"].split()

    # a request's way through, as Triton words it
    states = [m for m in messages if m.startswith('"[request id: tagged] Setting state')]
    assert states == [
        f'"[request id: tagged] Setting state from {before} to {after}"'
        for before, after in (("INITIALIZED", "PENDING"), ("PENDING", "EXECUTING"), ("EXECUTING", "RELEASED"))
    ]

    assert in_order(log, exit_lines("bare")), log
    assert '"Timeout 30: Found 0 model versions that have in-flight inferences"' in messages

    # a refused inference, over each protocol, with the error its client got; as in Triton, the
    # request's id once the request exists (its model found), none before
    unknown = "\"[request id: <id_unknown>] Infer failed: Request for unknown model: 'nope' is not found\""
    assert messages.count(unknown) == 2, log
    for protocol in ("http", "grpc"):
        failed = f'"[request id: wrong-{protocol}] Infer failed: '
        assert sum(m.startswith(failed) and "WRONG" in m for m in messages) == 1, log

    # verbose lines are the server's: none of uvicorn's start lines nor grpc's debug records
    for chatter in ("Uvicorn running", "Started server process", "_cygrpc", "Loaded running loop"):
        assert chatter not in log


def test_unescaped_heading_stays_as_written(tmp_path: Path) -> None:
    """With ``TRITON_SERVER_ESCAPE_LOG_MESSAGES=0`` messages are not quoted, headings neither."""
    repo = tmp_path / "repo"
    write_model(repo, "bare", BARE, IDENTITY_PY)
    with ServerProcess([repo], ["--log-verbose=1"], env={"TRITON_SERVER_ESCAPE_LOG_MESSAGES": "0"}) as server:
        log = server.log()
    assert re.search(r"\] Server side auto-completed config: \nname: \"bare\"\n", log), log
    assert re.search(r"\] Started HTTPService at 127\.0\.0\.1:\d+$", log, re.MULTILINE), log


class TritonCommand(ServerProcess):
    """The same server, started as ``tritonserver <flags>`` (the console script beside ``naiad``)."""

    def command(self) -> list[str]:
        flags = super().command()[4:]  # (after ``python -m naiad serve``)
        return [str(Path(sys.executable).with_name("tritonserver")), *flags]


def test_tritonserver_command_serves(tmp_path: Path) -> None:
    if not Path(sys.executable).with_name("tritonserver").exists():
        pytest.fail("the tritonserver console script is not installed beside this interpreter (pip install -e .)")
    with TritonCommand([EXAMPLES], ["--model-control-mode=explicit", "--load-model=add_sub"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            assert client.get_server_metadata()["name"] == "triton"
            assert [m["name"] for m in client.get_model_repository_index() if m.get("state") == "READY"] == ["add_sub"]
        finally:
            client.close()
        assert server.process is not None
        assert Path(server.process.args[0]).name == "tritonserver"
