"""A client port something else listens on: ``naiad serve`` says so in one line and exits with status 1,
in one process and with frontend workers (whose listeners share their ports with ``SO_REUSEPORT``, and
would otherwise be started again and again), leaving nothing running and the port to its owner; and
``naiad.frontends.ports.check_free`` tells a taken port from a free one, however it is named."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from naiad.frontends.ports import check_free

from tests.engine.test_workers import alive
from tests.support.processes import descendants
from tests.support.server import EXAMPLES, free_port


@pytest.fixture
def taken() -> Iterator[socket.socket]:
    """A port something else listens on (without ``SO_REUSEPORT``), on every IPv4 address."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("0.0.0.0", 0))
    holder.listen()
    with holder:
        yield holder


def test_a_taken_port_is_told_from_a_free_one(taken: socket.socket) -> None:
    port = taken.getsockname()[1]
    for host in ("127.0.0.1", "0.0.0.0", "::", "[::]", "localhost", ""):
        with pytest.raises(RuntimeError, match=r"^address already in use$"):
            check_free(host, port)
    check_free("127.0.0.1", free_port())
    check_free("::", free_port())
    check_free("127.0.0.1", 0)
    with pytest.raises(RuntimeError, match=r"not known|resolution"):
        check_free("no-such-host.invalid", free_port())


@pytest.mark.parametrize("frontend_workers", [0, 2], ids=["in-process", "workers"])
@pytest.mark.parametrize("frontend", ["HTTP", "gRPC"])
def test_the_server_exits_with_one_line_when_a_client_port_is_taken(
    frontend: str, frontend_workers: int, taken: socket.socket, tmp_path: Path
) -> None:
    port = taken.getsockname()[1]
    ports = {"HTTP": free_port(), "gRPC": free_port()}
    ports[frontend] = port
    command = [
        sys.executable, "-m", "naiad", "serve", f"--model-repository={EXAMPLES}",
        f"--http-port={ports['HTTP']}", f"--grpc-port={ports['gRPC']}", f"--metrics-port={free_port()}",
        "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
        f"--frontend-workers={frontend_workers}",
    ]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    children: set[int] = set()
    try:
        while server.poll() is None:  # (what it started, seen while it runs)
            children.update(descendants(server.pid))
            try:
                server.wait(0.05)
            except subprocess.TimeoutExpired:
                pass
        output = server.communicate(timeout=60)[0]
    finally:
        server.kill()
    assert server.returncode == 1, output
    in_use = "address already in use"
    if frontend == "gRPC" or frontend_workers:
        assert f"{frontend} frontend cannot listen on 127.0.0.1:{port}: {in_use}" in output
    else:  # (uvicorn's words)
        assert in_use in output and "a frontend failed to start" in output
    assert "Traceback" not in output
    assert "starting it again" not in output  # no worker started to find its port taken
    # nothing was loaded for a server that could not listen: no model process, no template (a load
    # still running at the exit once made the backends change while they were closed, a traceback)
    assert "successfully loaded" not in output
    assert children == set()
    deadline = time.monotonic() + 10  # (model processes leave once the engine's socket closed)
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in children if alive(pid)] == []
    # the port is still its owner's
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        accepted, _ = taken.accept()
        accepted.close()
