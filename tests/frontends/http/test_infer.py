"""Inference through tritonclient.http in binary (its default) and JSON modes."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.http import RawClient
from tests.support.server import ServerProcess


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


def _add_sub_inputs(binary: bool) -> list[httpclient.InferInput]:
    a = np.array([1.5, 2.0, 3.0, 4.0], dtype=np.float32)
    b = np.array([0.5, 1.0, 1.0, 1.0], dtype=np.float32)
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs


@pytest.mark.parametrize("binary_in", [True, False])
@pytest.mark.parametrize("binary_out", [True, False])
def test_add_sub(client: httpclient.InferenceServerClient, binary_in: bool, binary_out: bool) -> None:
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary_out),
    ]
    result = client.infer("add_sub", _add_sub_inputs(binary_in), outputs=outputs, request_id="req-7")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [2.0, 3.0, 4.0, 5.0])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), [1.0, 1.0, 2.0, 3.0])
    response = result.get_response()
    assert response["id"] == "req-7"
    assert response["model_name"] == "add_sub"
    assert response["model_version"] == "1"


def test_no_outputs_requested_returns_all(client: httpclient.InferenceServerClient) -> None:
    result = client.infer("add_sub", _add_sub_inputs(True))
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT0", "OUTPUT1"]


@pytest.mark.parametrize("binary", [False, True])
def test_outputs_come_in_the_order_the_model_made_them(
    client: httpclient.InferenceServerClient, binary: bool
) -> None:
    """As Triton 2.51 answers (checked side by side): the order the Python model returned its outputs
    in (``sub_add``: OUTPUT1 first), whether the request named them (in either order) or not."""
    for names in (None, ["OUTPUT0", "OUTPUT1"], ["OUTPUT1", "OUTPUT0"]):
        outputs = (
            None if names is None else [httpclient.InferRequestedOutput(n, binary_data=binary) for n in names]
        )
        for model, made in (("add_sub", ["OUTPUT0", "OUTPUT1"]), ("sub_add", ["OUTPUT1", "OUTPUT0"])):
            result = client.infer(model, _add_sub_inputs(binary), outputs=outputs)
            assert [o["name"] for o in result.get_response()["outputs"]] == made
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [2.0, 3.0, 4.0, 5.0])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), [1.0, 1.0, 2.0, 3.0])


def test_an_output_outside_the_config_is_left_out_and_a_missing_one_is_no_error(raw: RawClient) -> None:
    """As Triton 2.51 answers (checked side by side): a response carries only outputs the request
    named, or the config's when it named none; one the model did not make is simply absent."""
    inputs = [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
    ]

    def answer(model: str, outputs: list[str] | None) -> tuple[int, dict[str, Any]]:
        body: dict[str, Any] = {"inputs": inputs}
        if outputs is not None:
            body["outputs"] = [{"name": name} for name in outputs]
        response = raw.post_json(f"/v2/models/{model}/infer", body)
        return response.status, response.json()

    status, body = answer("extra_output", None)
    assert status == 200
    assert [(o["name"], o["data"]) for o in body["outputs"]] == [
        ("OUTPUT0", [2.0, 3.0, 4.0, 5.0]),
        ("OUTPUT1", [0.0, 1.0, 2.0, 3.0]),
    ]
    assert answer("extra_output", ["EXTRA"]) == (
        400,
        {"error": "unexpected inference output 'EXTRA' for model 'extra_output'"},
    )
    status, body = answer("one_output", None)
    assert (status, [o["name"] for o in body["outputs"]]) == (200, ["OUTPUT1"])
    status, body = answer("one_output", ["OUTPUT0", "OUTPUT1"])
    assert (status, [(o["name"], o["data"]) for o in body["outputs"]]) == (
        200,
        [("OUTPUT1", [0.0, 1.0, 2.0, 3.0])],
    )
    assert answer("one_output", ["OUTPUT0"]) == (
        200,
        {"model_name": "one_output", "model_version": "1", "outputs": []},
    )


def test_requested_output_subset_and_order(client: httpclient.InferenceServerClient) -> None:
    outputs = [httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
    result = client.infer("add_sub", _add_sub_inputs(False), outputs=outputs, model_version="1")
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None


def test_json_nested_and_flat_data(raw: RawClient) -> None:
    body = {
        "id": "nested",
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [[1, 2], [3, 4]]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
        ],
    }
    response = raw.post_json("/v2/models/add_sub/infer", body)
    assert response.status == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "id": "nested",
        "model_name": "add_sub",
        "model_version": "1",
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [4], "data": [2.0, 3.0, 4.0, 5.0]},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": [4], "data": [0.0, 1.0, 2.0, 3.0]},
        ],
    }


def test_binary_response_layout(raw: RawClient) -> None:
    body = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }
    response = raw.post_json("/v2/models/add_sub/infer", body)
    assert response.status == 200
    assert response.headers["content-type"] == "application/octet-stream"
    header_length = int(response.headers["inference-header-content-length"])
    header = json.loads(response.body[:header_length])
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 16}
    np.testing.assert_array_equal(np.frombuffer(response.body[header_length:], "<f4"), [2, 3, 4, 5])


@pytest.mark.parametrize("binary", [True, False])
def test_bytes_identity_is_nul_safe(client: httpclient.InferenceServerClient, binary: bool) -> None:
    data = np.array([[b"he\x00llo", b"\x00\x01\x02\x03", b"", "caf\u00e9".encode()]], dtype=np.object_)
    inp = httpclient.InferInput("INPUT0", [1, 4], "BYTES")
    inp.set_data_from_numpy(data, binary_data=binary)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
    result = client.infer("simple_identity", [inp], outputs=[out])
    expected = data.tolist() if binary else [[b.decode() for b in row] for row in data.tolist()]
    assert result.as_numpy("OUTPUT0").tolist() == expected  # JSON carries BYTES as text


def test_custom_parameters_reach_the_model(client: httpclient.InferenceServerClient) -> None:
    inp = httpclient.InferInput("INPUT0", [1], "INT32")
    inp.set_data_from_numpy(np.array([3], dtype=np.int32))
    result = client.infer(
        "params_echo",
        [inp],
        outputs=[httpclient.InferRequestedOutput("PARAMS")],
        request_id="echo-1",
        parameters={"temperature": 0.5, "mode": "fast", "n": 3, "flag": True},
        priority=0,
        timeout=1000,
    )
    text, names, request_id = result.as_numpy("PARAMS").tolist()
    assert json.loads(text) == {"flag": True, "mode": "fast", "n": 3, "temperature": 0.5}
    assert names == b"PARAMS"
    assert request_id == b"echo-1"


@pytest.mark.parametrize("value", [[1], {"a": [1]}, None], ids=["array", "object", "null"])
def test_an_inputs_parameter_of_any_json_value_is_ignored_as_triton_ignores_it(
    raw: RawClient, server: ServerProcess, value: object
) -> None:
    # (with frontend workers such a value once reached the engine's channel, which could not read
    # it: the worker lost its engine, and every request it had in flight failed)
    body = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": [1], "parameters": {"x": value}}]}
    for _ in range(2):
        response = raw.post_json("/v2/models/params_echo/infer", body)
        assert response.status == 200, response.body
    assert raw.request("GET", "/v2/health/ready").status == 200
    assert "Fatal error" not in server.log()


def test_reserved_parameters_rejected(raw: RawClient) -> None:
    body = {
        "parameters": {"triton_enable_empty_final_response": True},
        "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": [1]}],
    }
    response = raw.post_json("/v2/models/params_echo/infer", body)
    assert response.status == 400
    assert "reserved for Triton usage" in response.error


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_request_and_response(client: httpclient.InferenceServerClient, algorithm: str) -> None:
    result = client.infer(
        "add_sub",
        _add_sub_inputs(True),
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [2.0, 3.0, 4.0, 5.0])


def test_python_model_errors_fail_only_that_request(
    client: httpclient.InferenceServerClient, server: ServerProcess
) -> None:
    def run(value: int) -> httpclient.InferResult:
        inp = httpclient.InferInput("INPUT0", [1], "INT32")
        inp.set_data_from_numpy(np.array([value], dtype=np.int32))
        return client.infer("failing", [inp])

    with pytest.raises(InferenceServerException) as info:
        run(0)
    assert "zero is invalid" in str(info.value)
    assert info.value.status() == "400"
    with pytest.raises(InferenceServerException) as info:
        run(-1)
    # Triton 2.51's words, the model's frame appended as its stub appends it (checked side by side);
    # built in the model process (the default) and relayed unchanged
    source = Path(server.repositories[0]) / "failing" / "1" / "model.py"
    assert info.value.message() == (
        "Failed to process the request(s) for model 'failing_0', message: RuntimeError: negative input "
        f"is not allowed\n\nAt:\n  {source}(12): execute\n"
    )
    assert info.value.status() == "500"
    assert run(5).as_numpy("OUTPUT0").tolist() == [5]
    assert client.is_server_live()


def test_batch_size_above_max_is_rejected(raw: RawClient) -> None:
    body = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [5, 2], "data": list(range(10))}]}
    response = raw.post_json("/v2/models/batched_identity/infer", body)
    assert response.status == 400
    assert response.error == (
        "[request id: <id_unknown>] inference request batch-size must be <= 4 for 'batched_identity'"
    )
    body["inputs"][0]["shape"] = [4, 2]
    body["inputs"][0]["data"] = list(range(8))
    assert raw.post_json("/v2/models/batched_identity/infer", body).status == 200


def test_raw_binary_request(raw: RawClient) -> None:
    """``Inference-Header-Content-Length: 0``: the body is the single input; outputs come back binary."""
    payload = np.array([[1, 2, 3]], dtype="<i4").tobytes()
    response = raw.request(
        "POST", "/v2/models/batched_identity/infer", payload, {"Inference-Header-Content-Length": "0"}
    )
    assert response.status == 200, response.body
    length = int(response.headers["inference-header-content-length"])
    header = json.loads(response.body[:length])
    assert header["outputs"][0]["shape"] == [1, 3]
    assert np.frombuffer(response.body[length:], "<i4").tolist() == [1, 2, 3]
    text = raw.request(
        "POST", "/v2/models/one_string/infer", b"he\x00llo", {"Inference-Header-Content-Length": "0"}
    )
    assert text.status == 200
    length = int(text.headers["inference-header-content-length"])
    assert text.body[length:] == b"\x06\x00\x00\x00he\x00llo"


def test_a_chunked_body_that_also_declares_a_length_is_read_as_chunked(server: ServerProcess) -> None:
    """HTTP/1.1: the encoding overrides the length, as Triton reads it (``requests`` sends both when the
    caller sets ``Transfer-Encoding`` itself, as NVIDIA's qa L0_http does)."""
    payload = np.array([[5, 6]], dtype="<i4").tobytes()
    chunked = f"{len(payload):X}\r\n".encode() + payload + b"\r\n0\r\n\r\n"
    head = (
        "POST /v2/models/batched_identity/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: 0\r\n"
        f"Transfer-Encoding: chunked\r\nContent-Length: {len(chunked)}\r\nConnection: close\r\n\r\n"
    )
    host, port = server.http_url.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(head.encode() + chunked)
        answer = b""
        while data := connection.recv(65536):
            answer += data
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert answer.endswith(payload)


@pytest.mark.parametrize(
    ("model", "payload", "message"),
    [
        ("simple_identity", b"427", "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]"),
        (
            "two_variable",
            bytes(8),
            "The shape of the raw input 'INPUT0' can not be deduced because there are more than one "
            "variable-sized dimension",
        ),
    ],
)
def test_a_raw_binary_request_whose_shape_cannot_be_deduced_is_refused_in_tritons_words(
    raw: RawClient, model: str, payload: bytes, message: str
) -> None:
    response = raw.request("POST", f"/v2/models/{model}/infer", payload, {"Inference-Header-Content-Length": "0"})
    assert (response.status, response.error) == (400, message)


def test_raw_binary_request_needs_a_single_input(raw: RawClient) -> None:
    response = raw.request(
        "POST", "/v2/models/add_sub/infer", bytes(16), {"Inference-Header-Content-Length": "0"}
    )
    assert response.status == 400
    assert "Raw request must only have 1 input" in response.error
