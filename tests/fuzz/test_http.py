"""Thousands of generated malformed requests: each gets a 4xx with an error body; the server survives."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.http import RawClient, RawResponse
from tests.support.server import ServerProcess

SEEDS: list[tuple[str, dict[str, Any]]] = [
    (
        "add_sub",
        {
            "id": "a",
            "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
                {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        },
    ),
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
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
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
        action = draw(st.sampled_from(["replace", "delete"]))
        if action == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(json_values)
    body = json.dumps(document).encode()
    headers: dict[str, str] = {}
    style = draw(st.sampled_from(["json", "truncate", "binary-tail", "header-length"]))
    if style == "truncate":
        body = body[: draw(st.integers(0, max(0, len(body) - 1)))]
    elif style == "binary-tail":
        tail = draw(st.binary(max_size=64))
        headers["Inference-Header-Content-Length"] = str(len(body))
        body += tail
    elif style == "header-length":
        headers["Inference-Header-Content-Length"] = str(draw(st.integers(-5, len(body) + 5)))
    return model, body, headers


@pytest.fixture(scope="module")
def fuzz_client(server: ServerProcess) -> Iterator[RawClient]:
    client = RawClient(server.http_url)
    yield client
    client.close()


def _check(response: RawResponse) -> None:
    if response.status == 200:
        return  # a mutation can be a valid request
    assert 400 <= response.status < 500, (response.status, response.body)
    assert response.error


@settings(
    max_examples=2500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=mutated_requests())
def test_mutated_json_requests(fuzz_client: RawClient, case: tuple[str, bytes, dict[str, str]]) -> None:
    model, body, headers = case
    _check(fuzz_client.request("POST", f"/v2/models/{model}/infer", body, headers))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=256), header_length=st.none() | st.integers(-2, 300))
def test_random_bytes(fuzz_client: RawClient, body: bytes, header_length: int | None) -> None:
    headers = {} if header_length is None else {"Inference-Header-Content-Length": str(header_length)}
    _check(fuzz_client.request("POST", "/v2/models/add_sub/infer", body, headers))


def test_server_still_serves_after_fuzzing(fuzz_client: RawClient) -> None:
    response = fuzz_client.request("POST", "/v2/models/add_sub/infer", json.dumps(SEEDS[0][1]))
    assert response.status == 200
    assert json.loads(response.body[: int(response.headers["inference-header-content-length"])])["id"] == "a"
