"""A real ``naiad serve`` process on free ports, for tests and benchmarks.

Tests talk to the server the way users do (tritonclient over the network), so the server runs as its own
process, started by the test, and is stopped with SIGTERM like a pod would be.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
import zlib
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "model_repository"
TRITON_EXAMPLES = ROOT.parent / "shared" / "triton-examples" / "model_repository"


_handed_out: set[int] = set()


def _own_ports() -> range | None:
    """This test process's share of the ports below the kernel's ephemeral range (which ``bind(0)``
    never hands out): the workers of one pytest run get disjoint shares, and a second run at the same
    time most likely other ones, so a port one worker picked is not taken by another before its server
    binds it (with ``bind(0)`` alone, a fake pod once found another worker's gRPC server on its HTTP
    port).  None where the range leaves no room: ``free_port`` then falls back to ``bind(0)``."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    start, shares = 10000, 4 * 8  # 4 run slots x 8 workers
    size = (low - start) // shares
    if size < 200:
        return None
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % 8 if worker.isdigit() else 0
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getpid())
    first = start + (zlib.crc32(run.encode()) % 4 * 8 + index) * size
    return range(first, first + size)


_OWN_PORTS = _own_ports()
_next_own = 0


def _listenable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nothing listens on now, taken in turn from this process's share (see ``_own_ports``), so
    consecutive calls (a server's HTTP, gRPC and metrics ports) never give the same one; outside such a
    share, from ``bind(0)``, never one this process handed out before."""
    global _next_own
    if _OWN_PORTS is not None:
        for _ in range(len(_OWN_PORTS)):
            port = _OWN_PORTS[_next_own % len(_OWN_PORTS)]
            _next_own += 1
            if _listenable(port):
                return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def exit_lines(model: str, version: int = 1) -> list[str]:
    """What tritonserver logs as it stops, in its order, for a server serving one model version."""
    return [
        "Waiting for in-flight requests to complete.",
        "model versions that have in-flight inferences",
        "All models are stopped, unloading models",
        f"successfully unloaded '{model}' version {version}",
    ]


def in_order(log: str, texts: Sequence[str]) -> bool:
    """Whether each of ``texts`` is in ``log``, each after the one before it."""
    at = 0
    for text in texts:
        at = log.find(text, at)
        if at < 0:
            return False
        at += len(text)
    return True


class ServerProcess:
    """``with ServerProcess([repo]) as server: ... server.http_url ...``"""

    def __init__(
        self,
        repositories: Sequence[Path | str],
        args: Sequence[str] = (),
        *,
        wait_ready: bool = True,
        env: dict[str, str] | None = None,
        frontend_workers: int = 0,
    ) -> None:
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        # 0: one process; a test in both modes passes its ``frontend_workers`` (tests.support.modes)
        self.frontend_workers = frontend_workers
        self.repositories = [str(r) for r in repositories]
        self.args = list(args)
        self.wait_ready = wait_ready
        self.env = env
        self._log = tempfile.NamedTemporaryFile(prefix="naiad-server-", suffix=".log", delete=False)
        # removed once the test lets go of the server, or at exit: a test that starts and stops one by
        # hand (to read its log after it stopped) never calls ``__exit__``
        weakref.finalize(self, _remove_log, self._log)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"127.0.0.1:{self.metrics_port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "naiad", "serve"]
        for repo in self.repositories:
            cmd.append(f"--model-repository={repo}")
        cmd += [
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
        ]
        if not any(arg.startswith("--frontend-workers") for arg in self.args):
            cmd.append(f"--frontend-workers={self.frontend_workers}")
        return cmd + self.args

    def start(self) -> ServerProcess:
        """Start and wait until it answers.  A port picked free can be taken by another test's process
        before the server binds it (parallel workers, clients' ephemeral ports): the server then exits
        with ``address already in use``, and is started again on new ports (a few times at most)."""
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(self.env or {}))
        for attempt in range(3):
            self.process = subprocess.Popen(
                self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            try:
                self._wait("/v2/health/ready" if self.wait_ready else "/v2/health/live")
                return self
            except RuntimeError:
                self.stop(signal.SIGKILL)
                if attempt == 2 or "address already in use" not in self.log():
                    self._discard_log()
                    raise
                self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
                self._log.truncate(0)
                self._log.seek(0)
            except BaseException:
                self.stop(signal.SIGKILL)
                self._discard_log()
                raise
        raise AssertionError("unreachable")

    def _discard_log(self) -> None:
        _remove_log(self._log)

    def _wait(self, path: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"http://{self.http_url}{path}", timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server did not answer {path} within {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def logged(self, text: str, timeout: float = 10.0) -> bool:
        """Whether ``text`` reaches the log within ``timeout``: a model process's log lines come on a
        pipe of their own, so possibly after the answer they go with reached the client."""
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 40.0) -> int:
        """Signal the server and wait; returns its exit status."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        _remove_log(self._log)


def _remove_log(log: IO[bytes]) -> None:
    log.close()
    Path(log.name).unlink(missing_ok=True)
