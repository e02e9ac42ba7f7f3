"""Where the frontends listen, as NVIDIA's ``qa/L0_socket`` checks Triton: two frontends on one port
and address stop the server; a frontend turned off takes nothing; the same port on two addresses is
two sockets, each answering its protocol."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.server import EXAMPLES, free_port

SERVE = [sys.executable, "-m", "naiad", "serve", f"--model-repository={EXAMPLES}"]


def _refused(*args: str) -> str:
    """The output of a server that must stop by itself, non-zero."""
    done = subprocess.run([*SERVE, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    return done.stdout + done.stderr


@contextmanager
def _serving(args: list[str], ready: Callable[[], bool]) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([*SERVE, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            try:
                if ready():
                    break
            except Exception:  # (not listening yet)
                pass
            time.sleep(0.2)
        assert process.poll() is None, "the server stopped"
        yield process
    finally:
        process.terminate()
        process.wait(timeout=60)


def _grpc_ready(url: str) -> Callable[[], bool]:
    def ready() -> bool:
        with grpcclient.InferenceServerClient(url) as client:
            return bool(client.is_server_ready())

    return ready


def _http_ready(url: str) -> Callable[[], bool]:
    def ready() -> bool:
        with httpclient.InferenceServerClient(url) as client:
            return bool(client.is_server_ready())

    return ready


def test_two_frontends_on_one_socket_stop_the_server() -> None:
    port, other = free_port(), free_port()
    output = _refused(f"--http-port={port}", f"--grpc-port={port}", f"--metrics-port={other}",
                      "--http-address=127.0.0.1", "--grpc-address=127.0.0.1")  # fmt: skip
    assert "address already in use" in output
    output = _refused(f"--http-port={port}", f"--grpc-port={other}", f"--metrics-port={port}",
                      "--http-address=127.0.0.1", "--metrics-address=127.0.0.1")  # fmt: skip
    assert "address already in use" in output


def test_a_frontend_turned_off_leaves_its_port_to_the_others() -> None:
    port = free_port()
    args = [f"--http-port={port}", f"--grpc-port={port}", f"--metrics-port={free_port()}", "--allow-http=false"]
    with _serving(args, _grpc_ready(f"127.0.0.1:{port}")):
        assert _grpc_ready(f"127.0.0.1:{port}")()


def test_one_port_on_two_addresses_is_two_sockets() -> None:
    port = free_port()
    args = [f"--http-port={port}", f"--grpc-port={port}", f"--metrics-port={free_port()}",
            "--http-address=127.0.0.1", "--grpc-address=127.0.0.2"]  # fmt: skip
    with _serving(args, _http_ready(f"127.0.0.1:{port}")):
        assert _grpc_ready(f"127.0.0.2:{port}")()
