"""The gRPC frontend's listeners: ``LISTENERS`` grpc.aio servers share the port inside the server (and
inside each frontend worker), every connection is answered whichever takes it, and another listener
shares the port only when ``--reuse-grpc-port`` says so (a port taken otherwise: tests/frontends/test_ports.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from naiad.frontends.grpc.server import LISTENERS

from tests.engine.test_workers import workers
from tests.support.processes import sockets_of
from tests.support.server import ServerProcess, free_port


def _listening(port: int, pids: list[int]) -> int:
    """Listening TCP sockets on ``port`` held by the processes ``pids`` (``/proc/net/tcp{,6}``)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                inodes.add(fields[9])
    return sum(len(inodes & sockets_of(pid)) for pid in pids)


def _add_sub(url: str) -> np.ndarray:
    with grpcclient.InferenceServerClient(url) as client:
        inputs = [grpcclient.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(np.arange(4, dtype=np.float32))
        inputs[1].set_data_from_numpy(np.ones(4, dtype=np.float32))
        output = client.infer("add_sub", inputs).as_numpy("OUTPUT0")
    assert output is not None
    return output


def test_the_servers_share_the_port_and_every_connection_is_answered(
    grpc_server: ServerProcess,
) -> None:
    assert grpc_server.process is not None
    processes = workers(grpc_server) if grpc_server.frontend_workers else [grpc_server.process.pid]
    assert len(processes) == max(1, grpc_server.frontend_workers)
    assert _listening(grpc_server.grpc_port, processes) == LISTENERS * len(processes)
    # a new connection each: the kernel spreads them over the listeners, and each one answers
    for _ in range(2 * LISTENERS):
        assert _add_sub(grpc_server.grpc_url).tolist() == [1.0, 2.0, 3.0, 4.0]


def test_with_reuse_grpc_port_the_server_shares_a_port_as_asked(grpc_repository: Path) -> None:
    port = free_port()
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    holder.bind(("127.0.0.1", port))
    holder.listen()
    with holder:
        server = ServerProcess([grpc_repository], ["--reuse-grpc-port=true"])
        server.grpc_port = port
        with server:
            assert server.process is not None
            assert _listening(port, [server.process.pid]) == LISTENERS
