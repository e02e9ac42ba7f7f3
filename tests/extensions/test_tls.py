"""TLS with certificates made by the test: mutual TLS over HTTP with tritonclient.http, where a client
without a certificate the server's root signed is turned away, and TLS over gRPC."""

from __future__ import annotations

import http.client
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.server import ServerProcess


def _infer(client: httpclient.InferenceServerClient | grpcclient.InferenceServerClient, module: ModuleType) -> None:
    inputs = [module.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(4, dtype=np.float32) * 2)


def _https(server: ServerProcess, certificates: dict[str, Path], with_certificate: bool) -> httpclient.InferenceServerClient:
    options = {"ca_certs": str(certificates["ca"])}
    if with_certificate:
        options |= {"certfile": str(certificates["client_cert"]), "keyfile": str(certificates["client_key"])}
    return httpclient.InferenceServerClient(server.http_url, ssl=True, ssl_options=options, network_timeout=5)


def test_https_with_a_client_certificate(tls_server: ServerProcess, certificates: dict[str, Path]) -> None:
    client = _https(tls_server, certificates, with_certificate=True)
    try:
        assert client.is_server_ready()
        _infer(client, httpclient)
    finally:
        client.close()


def test_https_without_a_client_certificate_is_refused(
    tls_server: ServerProcess, certificates: dict[str, Path]
) -> None:
    client = _https(tls_server, certificates, with_certificate=False)
    try:
        # TLS 1.3 clients finish their half of the handshake first: the refusal is a closed connection
        with pytest.raises((OSError, http.client.HTTPException)):
            client.is_server_live()
    finally:
        client.close()


def test_plain_http_is_not_served(tls_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(tls_server.http_url, network_timeout=5)
    try:
        with pytest.raises(http.client.HTTPException, match="connection closed"):
            client.is_server_live()
    finally:
        client.close()


def test_grpc_over_tls(tls_server: ServerProcess, certificates: dict[str, Path]) -> None:
    client = grpcclient.InferenceServerClient(
        tls_server.grpc_url, ssl=True, root_certificates=str(certificates["ca"])
    )
    try:
        assert client.is_server_ready()
        _infer(client, grpcclient)
    finally:
        client.close()
