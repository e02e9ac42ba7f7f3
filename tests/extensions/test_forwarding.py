"""Header forwarding: headers matching ``--{http,grpc}-header-forward-pattern`` reach the model as
request parameters (a Python model's ``request.parameters()``), others do not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from naiad.core.request import InferRequest
from naiad.frontends.forwarding import HeaderForwarding, compile_pattern

from tests.extensions.clients import client_for, refused
from tests.support.server import ServerProcess


def test_matching_headers_become_parameters(protocol: str, ext_server: ServerProcess) -> None:
    with client_for(protocol, ext_server) as client:
        tensor = client.input("INPUT0", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([b"params"], dtype=np.object_))
        headers = {"x-fwd-user": "alice", "x-fwd-tenant": "blue team", "x-other": "kept out"}
        result = client.client.infer(
            "strings", [tensor], headers=headers, parameters={"x-fwd-user": "body", "mine": 7}
        )
        seen = json.loads(result.as_numpy("OUTPUT0")[0])
    assert seen == {"x-fwd-user": "alice", "x-fwd-tenant": "blue team", "mine": 7}


def test_credentials_are_never_forwarded() -> None:
    request = InferRequest("m")
    HeaderForwarding(".*").apply(request, [("Authorization", "Bearer secret"), ("X-Trace", "t")])
    assert request.parameters == {"X-Trace": "t"}


@pytest.fixture(scope="module")
def open_server(ext_repository: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    """Every HTTP header forwarded; gRPC ones only when they start with ``X-FWD`` in capitals."""
    args = [
        "--http-header-forward-pattern=.*",
        "--grpc-header-forward-pattern=(?-i)^X-FWD",
        "--strict-readiness=false",  # (as ext_server: one of its models fails to load on purpose)
        "--exit-on-error=false",
    ]
    with ServerProcess([ext_repository], args, frontend_workers=frontend_workers) as server:
        yield server


def _parameters(client: Any, headers: dict[str, str]) -> dict[str, Any]:
    tensor = client.input("INPUT0", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([b"params"], dtype=np.object_))
    result = client.client.infer("strings", [tensor], headers=headers)
    parameters: dict[str, Any] = json.loads(result.as_numpy("OUTPUT0")[0])
    return parameters


@pytest.mark.parametrize("name", ["sequence_id", "priority", "binary_data_output", "triton_anything"])
def test_a_header_named_as_a_reserved_parameter_fails_the_request(
    open_server: ServerProcess, name: str
) -> None:
    with client_for("http", open_server) as client:
        with refused("400", f"Header '{name}' is reserved for Triton usage and cannot be forwarded."):
            _parameters(client, {name: "1"})
        assert _parameters(client, {"x-any": "v"})["x-any"] == "v"  # the others still go through


def test_a_pattern_may_turn_ignoring_case_off(open_server: ServerProcess) -> None:
    """gRPC metadata keys are lowercase: ``(?-i)^X-FWD`` (RE2's spelling, as Triton takes it) matches none."""
    with client_for("grpc", open_server) as client:
        assert "x-fwd-user" not in _parameters(client, {"x-fwd-user": "alice"})
    assert compile_pattern("(?-i)^X-FWD").search("X-FWD-user")
    assert not compile_pattern("(?-i)^X-FWD").search("x-fwd-user")
    assert compile_pattern("^X-FWD").search("x-fwd-user")  # Triton's default ignores case
