"""Generated malformed HTTP inference requests: each gets a 4xx with Triton's error body (or succeeds,
when a mutation happens to be valid); the server never answers 5xx and never drops the connection."""

from __future__ import annotations

import copy
import http.client
import json
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.conftest import GOOD_ADD_SUB, examples
from tests.fuzz.tally import Tally
from tests.support.http import RawClient
from tests.support.server import ServerProcess

SEEDS: list[tuple[str, dict[str, Any]]] = [
    ("add_sub", GOOD_ADD_SUB),
    (
        "simple_identity",
        {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 2], "data": ["x", "y"]}]},
    ),
    (
        "batched_identity",
        {
            "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [2, 2], "data": [1, 2, 3, 4]}],
            "parameters": {"priority": 0, "custom": "v"},
        },
    ),
    (
        "sequence",
        {
            "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "data": [3]}],
            "parameters": {"sequence_id": 7, "sequence_start": True, "sequence_end": True},
        },
    ),
    (
        "pipeline",
        {
            "inputs": [{"name": "IN", "datatype": "INT32", "shape": [1, 3], "data": [1, 2, 3]}],
            "outputs": [{"name": "OUT", "parameters": {"classification": 2}}],
        },
    ),
]

#: Values at the edges of what the decoders take: sizes past int64 and uint64, negative ones, ranks past
#: numpy's 64 dimensions, numbers where strings belong and the reverse.
edge_values = st.sampled_from([0, -1, 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, -(2**63), 1e300, -0.0, "1", "", "\u0000"])
shapes = st.lists(st.sampled_from([0, 1, 1, 1, 2, 3, -1, 2**31, 2**63 - 1, 2**64]), max_size=80)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["BYTES", "FP32", "BF16", "INT64", "binary_data", "shared_memory_region", "-1"])
    | edge_values,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=12,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


@st.composite
def mutated_requests(draw: st.DrawFn) -> tuple[str, bytes, dict[str, str]]:
    """A good request with 1-3 values replaced, removed or given a new key, then sent whole,
    truncated, with a binary tail, with a lying header length, or compressed (maybe wrongly)."""
    model, seed = draw(st.sampled_from(SEEDS))
    document = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(document) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add", "shape"]))
        if action == "shape":  # a shape at the edges, or of any rank holding one element of data
            rank = draw(st.none() | st.sampled_from([0, 1, 3, 63, 64, 65, 80]))
            for item in document.get("inputs", []) if isinstance(document.get("inputs"), list) else []:
                if isinstance(item, dict):
                    item["shape"] = draw(shapes) if rank is None else [1] * rank
                    if rank is not None:
                        item["data"] = ["x"] if item.get("datatype") == "BYTES" else [1]
        elif action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["parameters", "binary_data_size", "shape", "x", "outputs"]))] = draw(
                json_values
            )
        else:
            parent[path[-1]] = draw(json_values)
    body = json.dumps(document).encode()
    headers: dict[str, str] = {}
    style = draw(st.sampled_from(["json", "truncate", "binary-tail", "header-length", "compressed"]))
    if style == "truncate":
        body = body[: draw(st.integers(0, max(0, len(body) - 1)))]
    elif style == "binary-tail":
        tail = draw(st.binary(max_size=64))
        headers["Inference-Header-Content-Length"] = str(len(body))
        body += tail
    elif style == "header-length":
        headers["Inference-Header-Content-Length"] = draw(
            st.sampled_from([str(len(body)), "0", "-1", "abc", "1e3", " 12", str(len(body) + 5)])
        )
    elif style == "compressed":
        encoding = draw(st.sampled_from(["gzip", "deflate", "br", "identity", ""]))
        headers["Content-Encoding"] = encoding
        if draw(st.booleans()):
            body = zlib.compress(body) if encoding == "deflate" else _gzip(body)
        if draw(st.booleans()):
            body = body[: draw(st.integers(0, len(body)))]
    if draw(st.booleans()):
        headers["Accept-Encoding"] = draw(st.sampled_from(["gzip", "deflate;q=0.2, gzip;q=x", "br", ""]))
    return model, body, headers


def _gzip(data: bytes) -> bytes:
    deflater = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return deflater.compress(data) + deflater.flush()


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[RawClient]:
    client = RawClient(server.http_url)
    yield client
    client.close()


def send(client: RawClient, tally: Tally, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> None:
    what = f"{method} {path} {headers} {(body or b'')[:200]!r}"
    try:
        response = client.request(method, path, body, headers)
    except (http.client.HTTPException, OSError) as exc:
        client.close()  # the next request starts on a new connection
        tally.crash(f"{what}: {exc!r}")
        raise
    tally.http(response.status, response.body, what)


FUZZ = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=False,
)


@settings(FUZZ, max_examples=examples(400, 4000))
@given(case=mutated_requests())
def test_mutated_json_requests(client: RawClient, tally: Tally, case: tuple[str, bytes, dict[str, str]]) -> None:
    model, body, headers = case
    send(client, tally, "POST", f"/v2/models/{model}/infer", body, headers)


@settings(FUZZ, max_examples=examples(100, 1000))
@given(
    body=st.binary(max_size=256),
    header_length=st.none() | st.integers(-2, 300),
    model=st.sampled_from([seed[0] for seed in SEEDS]),
)
def test_random_bytes(client: RawClient, tally: Tally, body: bytes, header_length: int | None, model: str) -> None:
    headers = {} if header_length is None else {"Inference-Header-Content-Length": str(header_length)}
    send(client, tally, "POST", f"/v2/models/{model}/infer", body, headers)


segments = st.sampled_from(
    ["v2", "models", "add_sub", "versions", "1", "0", "-1", "99999999999999999999", "infer", "ready", "config",
     "stats", "trace", "setting", "generate", "generate_stream", "..", ".", "%2F", "%00", "%ff", "a%20b",
     "repository", "index", "load", "unload", "logging", "health", "live", "systemsharedmemory", "region",
     "status", "register", "unregister", "cudasharedmemory", ""]
)  # fmt: skip


@settings(FUZZ, max_examples=examples(100, 1000))
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"]),
    parts=st.lists(segments | st.text(alphabet="abc%/.:_-0123456789", max_size=6), min_size=1, max_size=7),
    body=st.none() | st.binary(max_size=64) | json_values.map(lambda v: json.dumps(v).encode()),
    query=st.sampled_from(["", "?x=1", "?", "?%zz"]),
)
def test_any_route(
    client: RawClient, tally: Tally, method: str, parts: list[str], body: bytes | None, query: str
) -> None:
    """Any method on any path made of the API's words: a route's answer, or 404/405/400."""
    path = "/" + "/".join(parts) + query
    if any(part in ("unload",) for part in parts) or (parts[:2] == ["v2", "logging"] and method == "POST"):
        return  # never unload the models under test, never change the server's log settings
    if method == "HEAD":
        return  # a HEAD answer has no body to hold the error
    send(client, tally, method, path, body, {})


@settings(FUZZ, max_examples=examples(60, 600))
@given(
    model=st.sampled_from([seed[0] for seed in SEEDS]),
    endpoint=st.sampled_from(["generate", "generate_stream"]),
    body=st.dictionaries(
        st.sampled_from(["INPUT0", "INPUT1", "IN", "text_input", "parameters", "id", "stream", "x"]), json_values, max_size=4
    ).map(lambda d: json.dumps(d).encode())
    | st.binary(max_size=64),
)
def test_generate_requests(client: RawClient, tally: Tally, model: str, endpoint: str, body: bytes) -> None:
    """The generate extension's endpoints: inputs by name in a flat JSON object."""
    send(client, tally, "POST", f"/v2/models/{model}/{endpoint}", body, {})
