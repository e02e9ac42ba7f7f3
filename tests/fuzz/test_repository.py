"""Generated malformed model repository requests (index, load, unload; HTTP and gRPC): each gets a
client's error with Triton's error body, or succeeds; the served models keep serving.

Only ``scratch`` and names no repository holds are loaded and unloaded: the models the other fuzzers
send requests to stay loaded (a load of one of them with a broken override leaves it serving, as a
failed reload does)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from tests.fuzz.conftest import examples
from tests.fuzz.tally import Tally
from tests.fuzz.test_http import json_values, send
from tests.support.http import RawClient
from tests.support.server import ServerProcess

names = st.sampled_from(["scratch", "nope", "..", "a/b", "%2e%2e", "scratch%00", "x" * 300, "add_sub%2F..", "%20"])

CONFIGS = [
    '{"backend": "python", "max_batch_size": 0, "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [-1]}], '
    '"output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [-1]}]}',
    '{"backend": "onnxruntime"}',
    '{"max_batch_size": -3}',
    '{"input": "no"}',
    '{"name": "other"}',
    "{not json",
    '{"version_policy": {"specific": {"versions": [-1, 99]}}}',
    '{"instance_group": [{"count": -1}]}',
    '{"dynamic_batching": {"max_queue_delay_microseconds": -5}}',
]  # fmt: skip


@st.composite
def load_parameters(draw: st.DrawFn) -> dict[str, Any]:
    parameters: dict[str, Any] = {}
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(["config", "file:1/model.py", "file:../x", "file:", "file:2/a/b",
                                    "default_version", "unload_dependents", "x"]))  # fmt: skip
        if key == "config":
            parameters[key] = draw(st.sampled_from(CONFIGS) | json_values)
        elif key.startswith("file:"):
            content = draw(st.binary(max_size=64))
            parameters[key] = draw(st.sampled_from([base64.b64encode(content).decode(), "!!notbase64", ""]) | json_values)
        else:
            parameters[key] = draw(json_values)
    return parameters


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[RawClient]:
    client = RawClient(server.http_url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield channel


FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@settings(FUZZ, max_examples=examples(60, 500))
@given(
    action=st.sampled_from(["load", "unload", "index"]),
    name=names,
    body=load_parameters().map(lambda p: json.dumps({"parameters": p}).encode())
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=32),
)
def test_http_repository_requests(client: RawClient, tally: Tally, action: str, name: str, body: bytes) -> None:
    path = "/v2/repository/index" if action == "index" else f"/v2/repository/models/{name}/{action}"
    send(client, tally, "POST", path, body, {})


def _grpc_parameters(draw: st.DrawFn, target: Any) -> None:
    for key, value in draw(load_parameters()).items():
        parameter = target[key]
        if isinstance(value, bool):
            parameter.bool_param = value
        elif isinstance(value, int) and -(2**63) <= value < 2**63:
            parameter.int64_param = value
        elif isinstance(value, str):
            if key.startswith("file:") and draw(st.booleans()):
                parameter.bytes_param = value.encode()
            else:
                parameter.string_param = value


@st.composite
def grpc_repository_requests(draw: st.DrawFn) -> tuple[str, bytes]:
    action = draw(st.sampled_from(["RepositoryModelLoad", "RepositoryModelUnload", "RepositoryIndex"]))
    if action == "RepositoryIndex":
        message: Any = pb.RepositoryIndexRequest(repository_name=draw(st.sampled_from(["", "x"])), ready=draw(st.booleans()))
    elif action == "RepositoryModelLoad":
        message = pb.RepositoryModelLoadRequest(model_name=draw(names))
        _grpc_parameters(draw, message.parameters)
    else:
        message = pb.RepositoryModelUnloadRequest(model_name=draw(names))
        _grpc_parameters(draw, message.parameters)
    data = message.SerializeToString()
    if draw(st.integers(0, 7)) == 0:
        data = draw(st.binary(max_size=40))
    return action, data


@settings(FUZZ, max_examples=examples(60, 500))
@given(case=grpc_repository_requests())
def test_grpc_repository_requests(channel: grpc.Channel, tally: Tally, case: tuple[str, bytes]) -> None:
    action, data = case
    call = channel.unary_unary(f"/inference.GRPCInferenceService/{action}")
    what = f"{action} {data[:200]!r}"
    try:
        call(data, timeout=60)
        tally.grpc(None, "", what)
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            tally.crash(what)
            raise
        tally.grpc(error.code().name, error.details() or "", what)
