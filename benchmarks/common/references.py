"""Start the servers we compare with: our own, NVIDIA's real Triton 2.51, and Seldon's MLServer.

Each runs as its own process on free ports, with the reference scripts from ``../shared/reference``.
Benchmarks start all of them in one run so that figures and ratios come from the same machine state.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from benchmarks.common.scratch import scratch

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "reference"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    """Resident set size of a process and its children, in MiB (from /proc)."""
    total = 0
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(c) for c in children]
    except OSError:
        pass
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


class Served:
    """A server process answering HTTP on ``http_port`` (and gRPC on ``grpc_port``)."""

    def __init__(
        self, name: str, command: list[str], http_port: int, grpc_port: int, cwd: Path | None = None
    ) -> None:
        self.name, self.command, self.http_port, self.grpc_port, self.cwd = (
            name,
            command,
            http_port,
            grpc_port,
            cwd,
        )
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log", delete=False)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def __enter__(self) -> Served:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            self.command,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=self.cwd,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + 600  # first use installs the reference venvs
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {Path(self.log.name).read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.http_url}/v2/health/ready", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not become ready")

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        self.log.close()
        if exc[0] is None:  # (kept after a failure, to read)
            Path(self.log.name).unlink(missing_ok=True)


def naiad(repository: Path, *args: str) -> Served:
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = [
        str(ROOT / ".venv" / "bin" / "naiad"),
        "serve",
        f"--model-repository={repository}",
        f"--http-port={http}",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
        *args,
    ]
    return Served("naiad", command, http, grpc)


def triton(repository: Path, *args: str) -> Served:
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = [
        "bash",
        str(SHARED / "triton.sh"),
        f"--model-repository={repository}",
        f"--http-port={http}",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
        *args,
    ]
    return Served("triton", command, http, grpc)


def mlserver(models: Path | None = None) -> Served:
    """MLServer on a copy of ``reference/mlserver`` (or ``models``) with free ports in its settings."""
    folder = scratch("bench-mlserver-")
    shutil.copytree(models or SHARED / "mlserver", folder, dirs_exist_ok=True)
    http, grpc, metrics = free_port(), free_port(), free_port()
    settings = json.loads((folder / "settings.json").read_text())
    settings.update(http_port=http, grpc_port=grpc, metrics_port=metrics)
    (folder / "settings.json").write_text(json.dumps(settings))
    return Served("mlserver", ["bash", str(SHARED / "mlserver.sh"), str(folder)], http, grpc)


def reference_add_sub_repository() -> Path:
    """A Triton repository holding only the reference ``add_sub`` (what all three servers run)."""
    folder = scratch("bench-repo-")
    shutil.copytree(SHARED / "models" / "add_sub", folder / "add_sub")
    return folder
