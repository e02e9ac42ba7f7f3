"""Header forwarding: headers matching ``--{http,grpc}-header-forward-pattern`` reach the model as
request parameters (a Python model's ``request.parameters()``), others do not."""

from __future__ import annotations

import json

import numpy as np
from naiad.core.request import InferRequest
from naiad.frontends.forwarding import HeaderForwarding

from tests.extensions.clients import client_for
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
