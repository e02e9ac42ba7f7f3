"""Each HTTP response leaves the server in one write (frontends/http/protocol.py), whole."""

from __future__ import annotations

import http.client
import socket
import struct
import sys

import pytest

from tests.support.server import ServerProcess

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="TCP_INFO's segment counters are Linux's")

#: ``tcpi_data_segs_in`` in Linux's ``struct tcp_info``: segments received that carried data.
_DATA_SEGS_IN = 152


def _data_segments_in(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    return int(struct.unpack_from("I", info, _DATA_SEGS_IN)[0])


def test_each_response_arrives_in_one_segment(server: ServerProcess) -> None:
    host, port = server.http_url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("GET", "/v2/models/add_sub")
        first = connection.getresponse()
        assert first.status == 200 and first.read()
        assert connection.sock is not None
        before = _data_segments_in(connection.sock)
        bodies = []
        for _ in range(20):
            connection.request("GET", "/v2/models/add_sub")
            response = connection.getresponse()
            assert response.status == 200
            bodies.append(response.read())
        # the head and the body of each answer came together: uvicorn alone writes them apart (40)
        assert _data_segments_in(connection.sock) - before == 20
        assert all(body.startswith(b'{"name":"add_sub"') for body in bodies)
    finally:
        connection.close()


def test_a_closing_connection_gets_the_whole_response_first(server: ServerProcess) -> None:
    host, port = server.http_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"GET /v2/models/add_sub HTTP/1.1\r\nhost: naiad\r\nconnection: close\r\n\r\n")
        received = b""
        while chunk := sock.recv(65536):  # until the server closes the connection
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    assert len(body) == length and body.startswith(b'{"name":"add_sub"')
