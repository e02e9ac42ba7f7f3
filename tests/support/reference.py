"""NVIDIA's real Triton 2.51 (``shared/reference/triton.sh``) as a process for side-by-side tests."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.server import ROOT, free_port

SCRIPT = ROOT.parent / "shared" / "reference" / "triton.sh"
VENV = Path(os.environ.get("NAIAD_REF_VENV", Path.home() / ".cache" / "naiad-reference" / "triton"))


def installed() -> bool:
    return SCRIPT.exists() and (VENV / "bin" / "python").exists()


@dataclass(frozen=True)
class Reference:
    http: str
    grpc: str
    metrics: str


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def reference_triton(repo: Path, log_path: Path, args: Sequence[str] = ()) -> Iterator[Reference]:
    """Start Triton on ``repo`` (its output in ``log_path``), wait until it is ready, stop it after."""
    http, grpc, metrics = free_port(), free_port(), free_port()
    ports = [f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            ["bash", str(SCRIPT), f"--model-repository={repo}", *ports, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while not ready(f"http://127.0.0.1:{http}/v2/health/ready"):
                if process.poll() is not None or time.monotonic() > deadline:
                    tail = log_path.read_text(errors="replace")[-2000:]
                    raise AssertionError(f"the reference Triton did not start:\n{tail}")
                time.sleep(0.2)
            yield Reference(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", f"127.0.0.1:{metrics}")
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
            process.wait()
