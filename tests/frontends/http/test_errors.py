"""Bad input gets a 4xx with Triton's ``{"error": ...}`` body, and the server keeps serving."""

from __future__ import annotations

import gzip
import json
import socket
import struct

import pytest

from tests.support.http import RawClient
from tests.support.server import ServerProcess

GOOD = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
    ]
}
URL = "/v2/models/add_sub/infer"


def _with(index: int, **changes: object) -> dict[str, object]:
    body = json.loads(json.dumps(GOOD))
    body["inputs"][index].update(changes)
    return body


def _binary_body(header: dict[str, object], payload: bytes) -> tuple[bytes, dict[str, str]]:
    text = json.dumps(header).encode()
    return text + payload, {"Inference-Header-Content-Length": str(len(text))}


CASES = [
    (
        "shape",
        _with(0, shape=[3], data=[1, 2, 3]),
        "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [4], got [3]. ",
    ),
    (
        "dtype",
        _with(0, datatype="INT32"),
        "[request id: <id_unknown>] inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' expects 'FP32'",
    ),
    (
        "missing",
        {"inputs": GOOD["inputs"][:1]},
        "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) ['INPUT0'], "
        "but missing required input(s) ['INPUT1']. Please provide all required input(s).",
    ),
    ("unknown input", _with(1, name="INPUTX"), "unexpected inference input 'INPUTX' for model 'add_sub'"),
    (
        "duplicate",
        _with(1, name="INPUT0"),
        "[request id: <id_unknown>] input 'INPUT0' already exists in request",
    ),
    (
        "unknown output",
        dict(GOOD, outputs=[{"name": "NOPE"}]),
        "unexpected inference output 'NOPE' for model 'add_sub'",
    ),
    (
        "duplicate output",
        dict(GOOD, outputs=[{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]),
        "[request id: <id_unknown>] output 'OUTPUT0' already exists in request",
    ),
    (
        "element count overflow",
        _with(0, shape=[2**4, 2**60 + 2], data=[1.0]),
        "invalid shape for input 'INPUT0': shape [16,1152921504606846978] causes total element count to "
        "exceed maximum size of 9223372036854775807",
    ),
    (
        "byte size overflow",
        _with(0, shape=[2**2, 2**60 + 2], data=[1.0]),
        "byte size overflow for input 'INPUT0': element count (4611686018427387912) * data type size (4) "
        "exceeds maximum allowed size (9223372036854775807)",
    ),
    (
        "data nested too deep",
        _with(0, data=json.loads("[" * 100 + "1, 2, 3, 4" + "]" * 100)),
        "JSON nesting depth exceeds maximum allowed limit (100)",
    ),
    (
        "data vs shape",
        _with(0, data=[1, 2, 3]),
        "Unable to parse 'data': Shape does not match true shape of 'data' field",
    ),
    (
        "no data",
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4]}, GOOD["inputs"][1]]},
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
        "'shared_memory_region' in 'parameters'. But no field is set",
    ),
    (
        "fp16 json",
        _with(0, datatype="FP16"),
        "receiving FP16 data via JSON is not supported. Please use the binary data format for input INPUT0",
    ),
    (  # (Triton reads no data for a shape of no elements: the model's shape check answers)
        "empty shape with data",
        _with(0, shape=[]),
        "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [4], got []. ",
    ),
    (
        "zero elements with data",
        _with(0, shape=[4, 0]),
        "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [4], got [4,0]. ",
    ),
    (  # (no element, but numpy cannot make an array of that shape: the client's fault, 400)
        "empty but too large",
        _with(0, shape=[0, 2**31, 2**31], data=[]),
        "invalid shape for input 'INPUT0': shape [0,2147483648,2147483648] has no elements, but its other "
        "dimensions exceed the maximum size of 9223372036854775807 bytes",
    ),
    (  # (the first fault Triton finds: the batch sizes before the shapes, here an unknown output first)
        "unknown output before a datatype",
        dict(_with(0, datatype="INT32"), outputs=[{"name": "NOPE"}]),
        "unexpected inference output 'NOPE' for model 'add_sub'",
    ),
    ("bad datatype", _with(0, datatype="FOO"), "invalid datatype for input INPUT0"),
    ("string in numbers", _with(0, data=[1, 2, "x", 4]), "Unable to parse 'data': attempt to access JSON non-number as double"),
    ("negative dim", _with(0, shape=[-4]), None),
    ("huge shape", _with(0, shape=[4_000_000_000_000, 4_000_000_000]), None),
    ("overflowing shape", _with(0, shape=[2**62, 2**62, 2**62]), None),
    ("id not string", dict(GOOD, id=5), None),
    ("inputs not list", {"inputs": {"INPUT0": 1}}, None),
    ("ragged data", _with(0, data=[[1, 2], [3]]), None),
]


def test_data_nested_just_within_tritons_limit_is_read(raw: RawClient) -> None:
    """99 arrays deep (past numpy's 64 dimensions), and ragged: Triton reads the elements in order."""
    for data in (json.loads("[" * 99 + "1, 2, 3, 4" + "]" * 99), [[1], [2, 3], [[4]]]):
        response = raw.post_json(URL, _with(0, data=data))
        assert response.status == 200, response.body
        assert json.loads(response.body)["outputs"][0]["data"] == [2, 3, 4, 5]


@pytest.mark.parametrize(("label", "body", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_json_request(raw: RawClient, label: str, body: dict[str, object], message: str | None) -> None:
    response = raw.post_json(URL, body)
    assert response.status == 400, response.body
    if message is not None:
        assert response.error == message
    assert raw.post_json(URL, GOOD).status == 200


@pytest.mark.parametrize("body", [b"notjson", b"[1,2,3]", b"{", b"\xff\xfe", b""])
def test_malformed_body(raw: RawClient, body: bytes) -> None:
    response = raw.request("POST", URL, body)
    assert response.status == 400
    assert response.error


def _binary_request(
    size_declared: int, payload: bytes, dtype: str = "FP32", shape: list[int] | None = None
) -> tuple[bytes, dict[str, str]]:
    header = {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": dtype,
                "shape": shape or [4],
                "parameters": {"binary_data_size": size_declared},
            },
            {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
        ]
    }
    return _binary_body(header, payload)


def test_lying_binary_data_size(raw: RawClient) -> None:
    body, headers = _binary_request(1 << 40, bytes(16))
    response = raw.request("POST", URL, body, headers)
    assert response.status == 400
    assert (
        response.error
        == "unexpected size for input 'INPUT0', expecting 1099511627776 additional bytes for model 'add_sub'"
    )


def test_truncated_binary_section(raw: RawClient) -> None:
    body, headers = _binary_request(16, bytes(10))
    response = raw.request("POST", URL, body, headers)
    assert response.status == 400
    assert "expecting 16 additional bytes" in response.error


def test_binary_size_not_matching_shape(raw: RawClient) -> None:
    body, headers = _binary_request(12, bytes(12))
    response = raw.request("POST", URL, body, headers)
    assert response.status == 400
    assert response.error == (
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'add_sub'. "
        "Expected 16, got 12"
    )


def test_trailing_binary_bytes(raw: RawClient) -> None:
    body, headers = _binary_request(16, bytes(20))
    assert raw.request("POST", URL, body, headers).status == 400


@pytest.mark.parametrize(
    ("value", "message"),
    [  # Triton's words, the body's length (2) named as it names it
        ("9999", "inference header size should be in range (0, 2), got: 9999"),
        ("-1", "inference header size should be in range (0, 2), got: -1"),
        ("abc", "Unable to parse Inference-Header-Content-Length, got: abc"),
        ("4294967296", "Unable to parse Inference-Header-Content-Length, value is out of range "
         "[ -2147483648, 2147483647 ], got: 4294967296"),
    ],
)
def test_header_length_out_of_range(raw: RawClient, value: str, message: str) -> None:
    response = raw.request("POST", URL, b"{}", {"Inference-Header-Content-Length": value})
    assert (response.status, response.error) == (400, message)


def test_header_length_is_read_as_triton_reads_it(raw: RawClient) -> None:
    # C++'s stoi: leading blanks, then the digits before anything else ("2 bytes" is 2)
    response = raw.request("POST", URL, b"{}", {"Inference-Header-Content-Length": "2 bytes"})
    assert (response.status, response.error) == (400, "Unable to parse 'inputs': expected an array")


def test_bytes_length_prefix_past_the_end(raw: RawClient) -> None:
    payload = struct.pack("<I", 1000) + b"abc"
    header = {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": "BYTES",
                "shape": [1, 1],
                "parameters": {"binary_data_size": len(payload)},
            }
        ]
    }
    body, headers = _binary_body(header, payload)
    response = raw.request("POST", "/v2/models/simple_identity/infer", body, headers)
    assert response.status == 400
    assert response.error == (
        "incomplete string data for inference input 'INPUT0', expecting string of length 1000 but only "
        "3 bytes available"
    )


def _strings(*items: bytes, last: bytes | None = None) -> bytes:
    """Framed BYTES elements; ``last`` is a raw tail (a prefix that lies about what follows)."""
    return b"".join(struct.pack("<I", len(item)) + item for item in items) + (last or b"")


def _two_strings(first: bytes, second: bytes) -> tuple[bytes, dict[str, str]]:
    """``simple_string`` (INPUT0 and INPUT1, each 16 elements) with these binary sections."""
    inputs = [
        {"name": name, "datatype": "BYTES", "shape": [1, 16], "parameters": {"binary_data_size": len(data)}}
        for name, data in (("INPUT0", first), ("INPUT1", second))
    ]
    return _binary_body({"inputs": inputs}, first + second)


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        # both inputs short of elements: Triton's core checks the inputs in its map's order, the
        # reverse of the request's, and names the second (checked against Triton 2.51)
        (
            _strings(*[b"a"] * 14),
            _strings(*[b"a"] * 14),
            "[request id: <id_unknown>] expected 16 string elements for inference input 'INPUT1' for "
            "model 'simple_string', got 14",
        ),
        (
            _strings(*[b"a"] * 18),
            _strings(*[b"a"] * 18),
            "[request id: <id_unknown>] unexpected number of string elements 17 for inference input "
            "'INPUT1' for model 'simple_string', expecting 16",
        ),
        # the last element of each runs past the end: its backend finds it, in the request's order
        (
            _strings(*[b"a"] * 15, last=struct.pack("<I", 9) + b"ab"),
            _strings(*[b"a"] * 15, last=struct.pack("<I", 9) + b"ab"),
            "incomplete string data for inference input 'INPUT0', expecting string of length 9 but only 2 "
            "bytes available",
        ),
        # a core fault of the second comes before the first's backend fault
        (
            _strings(*[b"a"] * 15, last=struct.pack("<I", 9) + b"ab"),
            _strings(*[b"a"] * 14),
            "[request id: <id_unknown>] expected 16 string elements for inference input 'INPUT1' for "
            "model 'simple_string', got 14",
        ),
        (
            _strings(*[b"a"] * 16),
            _strings(*[b"a"] * 15, last=b"\x01\x00"),
            "[request id: <id_unknown>] incomplete string length indicator for inference input 'INPUT1' "
            "for model 'simple_string', expecting 4 bytes but only 2 bytes available. Please make sure "
            "the string length indicator is in one buffer.",
        ),
    ],
    ids=["both-short", "both-long", "both-past-the-end", "core-before-backend", "prefix-cut"],
)
def test_which_refused_string_input_is_named(raw: RawClient, first: bytes, second: bytes, message: str) -> None:
    body, headers = _two_strings(first, second)
    response = raw.request("POST", "/v2/models/simple_string/infer", body, headers)
    assert (response.status, response.error) == (400, message)


@pytest.mark.parametrize(
    ("data", "message"),
    [  # (Triton 2.51's answers, side by side: its core counts the strings, as for binary ones)
        (["a"], "expected 16 string elements for inference input 'INPUT1' for model 'simple_string', got 1"),
        ([], "expected 16 string elements for inference input 'INPUT1' for model 'simple_string', got 0"),
        (
            [["a"] * 9, ["b"] * 9],
            "unexpected number of string elements 17 for inference input 'INPUT1' for model 'simple_string', "
            "expecting 16",
        ),
    ],
)
def test_json_strings_counted_as_tritons_core_counts_them(raw: RawClient, data: list[object], message: str) -> None:
    inputs = [
        {"name": "INPUT0", "datatype": "BYTES", "shape": [1, 16], "data": ["x"] * 16},
        {"name": "INPUT1", "datatype": "BYTES", "shape": [1, 16], "data": data},
    ]
    response = raw.request("POST", "/v2/models/simple_string/infer", json.dumps({"id": "s", "inputs": inputs}))
    assert (response.status, response.error) == (400, "[request id: s] " + message)


def test_bytes_count_larger_than_payload_allows(raw: RawClient) -> None:
    payload = struct.pack("<I", 1) + b"a"
    header = {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": "BYTES",
                "shape": [1, 2**40],
                "parameters": {"binary_data_size": len(payload)},
            }
        ]
    }
    body, headers = _binary_body(header, payload)
    response = raw.request("POST", "/v2/models/simple_identity/infer", body, headers)
    assert response.status == 400
    assert f"expected {2**40} string elements for inference input 'INPUT0' for model 'simple_identity', got 1" in response.error


@pytest.mark.parametrize("name", ["..", "%2E%2E", "a%2Fb", "x%00y", "%2F..%2Fetc"])
def test_path_tricks_in_model_names(raw: RawClient, name: str) -> None:
    response = raw.request("GET", f"/v2/models/{name}")
    assert response.status in (400, 404)
    assert response.error
    response = raw.post_json(f"/v2/models/{name}/infer", GOOD)
    assert response.status in (400, 404)


def test_unsupported_content_encoding(raw: RawClient) -> None:
    response = raw.request("POST", URL, b"xx", {"Content-Encoding": "br"})
    assert (response.status, response.error) == (501, "Unsupported compression type")


def test_corrupt_gzip(raw: RawClient) -> None:
    response = raw.request("POST", URL, b"\x1f\x8bnot gzip", {"Content-Encoding": "gzip"})
    assert response.status == 400


def test_gzip_bomb_is_bounded(raw: RawClient) -> None:
    bomb = gzip.compress(b"\x00" * (80 * 1024 * 1024))
    response = raw.request("POST", URL, bomb, {"Content-Encoding": "gzip"})
    assert response.status == 400
    assert response.error == (
        "Decompressed data size exceeds the maximum allowed value of 67108864 bytes. Use "
        "--http-max-input-size to increase the limit."
    )
    assert raw.post_json(URL, GOOD).status == 200


def test_a_body_past_the_limit_is_refused_in_tritons_words_for_its_kind(raw: RawClient) -> None:
    """A raw binary request's body is its input (Triton words its refusal so); a JSON one's is JSON."""
    limit = 64 * 1024 * 1024
    raw_input = raw.request(
        "POST", "/v2/models/batched_identity/infer", bytes(limit + 4), {"Inference-Header-Content-Length": "0"}
    )
    assert (raw_input.status, raw_input.error) == (
        400,
        f"Raw input has a byte_size ({limit + 4} bytes) that exceeds the maximum allowed value of {limit} bytes. "
        "Use --http-max-input-size to increase the limit.",
    )
    response = raw.request("POST", URL, b" " * (limit + 1), {"Content-Type": "application/json"})
    assert (response.status, response.error) == (
        400,
        f"request JSON size of {limit + 1} bytes exceeds the maximum allowed input size of {limit} bytes. "
        "Use --http-max-input-size to increase the limit.",
    )


def test_unknown_model_infer(raw: RawClient) -> None:
    response = raw.post_json("/v2/models/nope/infer", GOOD)
    assert (response.status, response.error) == (404, "Request for unknown model: 'nope' is not found")


def _chunked(server_url: str, chunks: int) -> bytes:
    """A raw binary request for ``batched_identity`` sent as ``chunks`` chunks of one byte each."""
    host, port = server_url.split(":")
    head = (
        "POST /v2/models/batched_identity/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: 0\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        try:
            connection.sendall(head.encode() + b"1\r\nA\r\n" * chunks + b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):  # (refused before it was all sent)
            pass
        answer = b""
        try:
            while data := connection.recv(65536):
                answer += data
        except ConnectionResetError:
            pass
    return answer


def test_a_chunked_request_of_too_many_chunks_is_refused_as_triton_refuses_it(server: ServerProcess) -> None:
    """Triton's limit: 65536 chunks with data (each costs far more than its byte)."""
    within = _chunked(server.http_url, 65536)  # 65536 bytes of INT32: the request is read
    assert within.startswith(b"HTTP/1.1 200"), within[:300]
    past = _chunked(server.http_url, 65536 + 4)
    assert past.startswith(b"HTTP/1.1 400"), past[:300]
    assert (
        b"Chunked request body exceeds maximum of 65536 non-empty chunks. Send fewer or larger HTTP chunks." in past
    )


@pytest.mark.parametrize(
    ("datatype", "value", "message"),
    [
        ("BOOL", 1, "Unable to parse 'data': attempt to access JSON non-boolean as boolean"),
        ("BYTES", 1, "Unable to parse JSON bytes array: attempt to access JSON non-string as string"),
        ("INT32", "x", "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
        ("UINT8", 1.5, "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"),
    ],
)
def test_a_value_of_the_wrong_json_type_is_refused_in_tritons_words(
    raw: RawClient, datatype: str, value: object, message: str
) -> None:
    """As Triton 2.51 words them (checked side by side)."""
    body = {"inputs": [{"name": "INPUT0", "datatype": datatype, "shape": [1], "data": [value]}]}
    response = raw.post_json(f"/v2/models/identity_{datatype.lower()}/infer", body)
    assert (response.status, response.error) == (400, message)
