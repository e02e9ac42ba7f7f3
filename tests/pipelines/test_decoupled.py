"""Decoupled models (Triton's python_backend repeat and square examples): 0, 1 or many responses per
request over gRPC streaming with ``triton_final_response`` and the optional empty final response, the
unary endpoints' refusals, and HTTP's generate / generate_stream (Server-Sent Events)."""

from __future__ import annotations

import asyncio
import json
import queue
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.server import ServerProcess

Answer = tuple[str, list[int], bool]


def _square_inputs(n: int, module: Any = grpcclient) -> list[Any]:
    tensor = module.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([n], dtype=np.int32))
    return [tensor]


def _repeat_inputs(values: list[int], delay_ms: int, wait_ms: int) -> list[grpcclient.InferInput]:
    arrays = {
        "IN": np.array(values, dtype=np.int32),
        "DELAY": np.full(len(values), delay_ms, dtype=np.uint32),
        "WAIT": np.array([wait_ms], dtype=np.uint32),
    }
    inputs = []
    for name, array in arrays.items():
        tensor = grpcclient.InferInput(name, list(array.shape), "INT32" if name == "IN" else "UINT32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def _stream(
    server: ServerProcess, requests: list[tuple[str, list[Any], str]], expected: int, empty_final: bool
) -> list[Answer]:
    """Send ``(model, inputs, id)`` requests on one stream; the first ``expected`` answers."""
    answers: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for model, inputs, request_id in requests:
            client.async_stream_infer(
                model, inputs, request_id=request_id, enable_empty_final_response=empty_final
            )
        got: list[Answer] = []
        for _ in range(expected):
            result, error = answers.get(timeout=20)
            assert error is None, error
            response = result.get_response()
            values = [int(v) for v in result.as_numpy("OUT")] if response.outputs else []
            got.append((response.id, values, response.parameters["triton_final_response"].bool_param))
        client.stop_stream()
    assert answers.empty()
    return got


def _per_request(answers: list[Answer]) -> dict[str, list[tuple[list[int], bool]]]:
    """Each request's answers in the order they came.  A decoupled model's answers to different
    requests on one stream go out as they come, as in Triton, so only each request's order is fixed."""
    grouped: dict[str, list[tuple[list[int], bool]]] = {}
    for request_id, values, final in answers:
        grouped.setdefault(request_id, []).append((values, final))
    return grouped


@pytest.mark.parametrize("model", ["square_int32", "square_processes"])
@pytest.mark.parametrize("empty_final", [False, True])
def test_square_sends_zero_one_or_many_responses(
    server: ServerProcess, model: str, empty_final: bool
) -> None:
    requests = [(model, _square_inputs(n), f"sq{n}") for n in (3, 0, 1, 2)]
    got = _stream(server, requests, 7 if empty_final else 6, empty_final)
    expected = [("sq3", [3], False), ("sq3", [3], False), ("sq3", [3], True)]
    if empty_final:
        expected.append(("sq0", [], True))
    expected += [("sq1", [1], True), ("sq2", [2], False), ("sq2", [2], True)]
    assert _per_request(got) == _per_request(expected)


@pytest.mark.parametrize("model", ["repeat_int32", "repeat_processes"])
@pytest.mark.parametrize("empty_final", [False, True])
def test_repeat_sends_from_a_thread_after_execute_returns(
    server: ServerProcess, model: str, empty_final: bool
) -> None:
    """repeat_int32 returns from execute after WAIT ms and sends the final flag on its own (in a worker
    process, the execution lasts until the final flag)."""
    requests = [
        (model, _repeat_inputs([4, 5, 6], delay_ms=20, wait_ms=1), "r1"),
        (model, _repeat_inputs([], delay_ms=0, wait_ms=0), "r2"),
        (model, _repeat_inputs([7], delay_ms=5, wait_ms=0), "r3"),
    ]
    got = _stream(server, requests, 7 if empty_final else 4, empty_final)
    expected = [("r1", [4], False), ("r1", [5], False), ("r1", [6], False)]
    expected += [("r1", [], True), ("r2", [], True)] if empty_final else []
    expected += [("r3", [7], False)]
    expected += [("r3", [], True)] if empty_final else []
    assert _per_request(got) == _per_request(expected)


def test_the_aio_client_streams_decoupled_responses(server: ServerProcess) -> None:
    async def run() -> list[tuple[str, list[int]]]:
        async with aioclient.InferenceServerClient(server.grpc_url) as client:

            async def requests() -> AsyncIterator[dict[str, Any]]:
                for n in (2, 1):
                    yield {
                        "model_name": "square_int32",
                        "inputs": _square_inputs(n, aioclient),
                        "request_id": f"a{n}",
                    }

            answers = []
            async for result, error in client.stream_infer(requests()):
                assert error is None
                answers.append((result.get_response().id, [int(v) for v in result.as_numpy("OUT")]))
                if len(answers) == 3:
                    break
            return answers

    answers = asyncio.run(run())  # (each request's in order; the two requests' may interleave)
    assert [a for a in answers if a[0] == "a2"] == [("a2", [2]), ("a2", [2])]
    assert [a for a in answers if a[0] == "a1"] == [("a1", [1])]


def test_unary_inference_refuses_decoupled_models(server: ServerProcess) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        http.infer("square_int32", _square_inputs(1, httpclient))
    assert (info.value.status(), info.value.message()) == (
        "501",
        "HTTP end point doesn't support models with decoupled transaction policy",
    )
    http.close()
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as client,
        pytest.raises(InferenceServerException) as info,
    ):
        client.infer("square_int32", _square_inputs(1))
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    assert info.value.message() == "ModelInfer RPC doesn't support models with decoupled transaction policy"


def _post(server: ServerProcess, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    request = urllib.request.Request(
        f"http://{server.http_url}{path}", data=json.dumps(body).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, response.headers.get("content-type"), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("content-type"), error.read()


def test_generate_stream_sends_each_response_as_an_event(server: ServerProcess) -> None:
    status, content_type, body = _post(
        server, "/v2/models/repeat_int32/generate_stream", {"IN": [5, 6, 7], "DELAY": [10, 10, 10], "WAIT": 1}
    )
    assert (status, content_type) == (200, "text/event-stream; charset=utf-8")
    events = [json.loads(chunk.removeprefix(b"data: ")) for chunk in body.split(b"\n\n") if chunk]
    assert events == [
        {"model_name": "repeat_int32", "model_version": "1", "OUT": value, "IDX": index}
        for index, value in enumerate([5, 6, 7])
    ]
    status, _, body = _post(server, "/v2/models/square_int32/generate_stream", {"IN": 0})
    assert (status, body) == (200, b"")  # the final flag alone is no event


def test_generate_stream_errors(server: ServerProcess) -> None:
    status, content_type, body = _post(server, "/v2/models/no_such_model/generate_stream", {"IN": 1})
    assert (status, content_type) == (404, "application/json")
    assert json.loads(body) == {"error": "Request for unknown model: 'no_such_model' is not found"}
    status, _, body = _post(server, "/v2/models/square_int32/generate_stream", {"IN": "x"})
    assert status == 400
    assert json.loads(body) == {"error": "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"}


def test_generate_returns_the_single_response(server: ServerProcess) -> None:
    status, content_type, body = _post(
        server, "/v2/models/add_sub/generate", {"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1], "id": "x"}
    )
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body) == {
        "id": "x",  # (the request's id, as Triton echoes it)
        "model_name": "add_sub",
        "model_version": "1",
        "OUTPUT0": [2.0, 3.0, 4.0, 5.0],
        "OUTPUT1": [0.0, 1.0, 2.0, 3.0],
    }
    status, _, body = _post(server, "/v2/models/square_int32/generate", {"IN": 1})
    assert (status, json.loads(body)) == (200, {"model_name": "square_int32", "model_version": "1", "OUT": 1})
    status, _, body = _post(server, "/v2/models/square_int32/generate", {"IN": 2})
    assert status == 400
    assert "generate expects model to produce exactly 1 response" in json.loads(body)["error"]
