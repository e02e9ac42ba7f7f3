"""Triton's restricted APIs (``--http-restricted-api``, ``--grpc-restricted-protocol``): exactly the
restricted groups refuse calls without their header, with Triton's status and message, and nothing
else changes."""

from __future__ import annotations

import contextlib
import queue
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.extensions.clients import Client, client_for, refused
from tests.extensions.conftest import RESTRICTIONS
from tests.support.server import ServerProcess


def _headers(protocol: str, name: str, value: str | None = None) -> dict[str, str]:
    """The header a restricted API wants, under the name the protocol sends it as (as in Triton)."""
    key = name if protocol == "http" else f"triton-grpc-protocol-{name}"
    return {key: RESTRICTIONS[name] if value is None else value}


def _refusal(protocol: str, header: str) -> tuple[str, str]:
    if protocol == "http":
        return "403", f"This API is restricted, expecting header '{header}'"
    return "StatusCode.UNAVAILABLE", f"This protocol is restricted, expecting header 'triton-grpc-protocol-{header}'"


def _infer(client: Client, headers: dict[str, str] | None = None) -> Any:
    inputs = [client.input("INPUT0", [4], "FP32"), client.input("INPUT1", [4], "FP32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones(4, np.float32))
    return client.client.infer("add_sub", inputs, headers=headers)


@pytest.fixture
def client(protocol: str, restricted_server: ServerProcess) -> Any:
    with client_for(protocol, restricted_server) as connected:
        yield connected


def test_unrestricted_apis_need_nothing(client: Client) -> None:
    assert client.client.is_server_live()
    assert client.client.is_server_ready()
    assert client.client.is_model_ready("add_sub")
    assert client.client.get_server_metadata()
    assert client.client.get_model_metadata("add_sub")
    assert client.client.get_model_config("add_sub")
    assert client.client.get_inference_statistics("add_sub")


def test_inference_needs_its_header(client: Client) -> None:
    status, message = _refusal(client.protocol, "infer-key")
    with refused(status, message):
        _infer(client)
    with refused(status, message):
        _infer(client, _headers(client.protocol, "infer-key", "wrong"))
    with refused(status, message):  # another API's header opens nothing else
        _infer(client, _headers(client.protocol, "admin-key"))
    result = _infer(client, _headers(client.protocol, "infer-key"))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full(4, 2, np.float32))


def test_repository_and_shared_memory_need_the_admin_header(client: Client) -> None:
    status, message = _refusal(client.protocol, "admin-key")
    calls = [
        lambda h: client.client.get_model_repository_index(headers=h),
        lambda h: client.client.get_system_shared_memory_status(headers=h),
        lambda h: client.client.unregister_system_shared_memory(headers=h),
        lambda h: client.client.get_cuda_shared_memory_status(headers=h),
    ]
    for call in calls:
        with refused(status, message):
            call(None)
        call(_headers(client.protocol, "admin-key"))


def test_streams_are_refused_too(restricted_server: ServerProcess) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    with client_for("grpc", restricted_server) as client:
        client.client.start_stream(callback=lambda result, error: answers.put(error or result))
        inputs = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.ones(4, np.float32))
        # the refusal may end the stream before this request is sent: then sending it fails too
        with contextlib.suppress(InferenceServerException):
            client.client.async_stream_infer("add_sub", inputs)
        answer = answers.get(timeout=10)
        client.client.stop_stream()
    assert isinstance(answer, InferenceServerException)
    assert "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'" in str(answer)


def test_unknown_routes_stay_not_found(restricted_server: ServerProcess) -> None:
    for path in ("/v2/nowhere", "/v2/models/add_sub/nowhere"):
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(f"http://{restricted_server.http_url}{path}")
        assert caught.value.code == 404
        caught.value.close()
