"""The ``naiad serve --model-control-mode explicit`` process that ``naiad analyze`` starts and measures.

Memory is the resident set of the server's whole process tree (Python-backend models run in child
processes), read from ``/proc`` and sampled while a candidate is under load; the peak is reported.  GPU
memory is the memory NVML lists for the processes of that tree, where NVML (``pynvml``, the ``gpu``
extra) and a GPU are present.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return found


def tree_pids(pid: int) -> set[int]:
    """``pid`` and all its descendants."""
    pending, seen = [pid], set()
    while pending:
        current = pending.pop()
        if current not in seen:
            seen.add(current)
            pending += _children(current)
    return seen


class GpuMemory:
    """GPU memory used by a set of processes, summed over every GPU (None: no NVML or no GPU)."""

    def __init__(self) -> None:
        self.nvml: Any = None
        self.handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self.nvml = pynvml
        except Exception:  # no module, no driver, no device: GPU memory is simply not reported
            self.handles = []

    @property
    def present(self) -> bool:
        return self.nvml is not None and bool(self.handles)

    def used_bytes(self, pids: set[int]) -> int:
        total = 0
        for handle in self.handles:
            try:
                processes = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except self.nvml.NVMLError:
                continue
            total += sum(p.usedGpuMemory or 0 for p in processes if p.pid in pids)
        return total


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants (0 where /proc cannot tell)."""
    total, pending, seen = 0, [pid], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue
        pending += _children(current)
    return total


class ServerUnderTest:
    """``with ServerUnderTest([repo], extra_args) as server: server.http_url ...``"""

    def __init__(
        self,
        repositories: Sequence[Path],
        extra_args: Sequence[str] = (),
        log_dir: Path | None = None,
        start_timeout: float = 120.0,
    ) -> None:
        self.repositories = list(repositories)
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.command = [
            sys.executable,
            "-m",
            "naiad",
            "serve",
            "--model-control-mode=explicit",
            *(f"--model-repository={r}" for r in repositories),
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
            *extra_args,
        ]
        folder = log_dir or Path(tempfile.gettempdir())
        folder.mkdir(parents=True, exist_ok=True)
        self.log_path = folder / "server.log"
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.gpu = GpuMemory()

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def __enter__(self) -> ServerUnderTest:
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"naiad serve exited with {self.process.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"http://{self.http_url}/v2/health/live", timeout=1) as answer:
                    if answer.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"naiad serve did not start within {self.start_timeout}s; see {self.log_path}")

    def rss_bytes(self) -> int:
        return tree_rss_bytes(self.process.pid) if self.process is not None else 0

    def gpu_bytes(self) -> int | None:
        """GPU memory of the server's processes (None where it cannot be measured)."""
        if not self.gpu.present or self.process is None:
            return None
        return self.gpu.used_bytes(tree_pids(self.process.pid))

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()


class PeakMemory:
    """Samples the server tree's RSS on a thread while a candidate runs; ``peak`` in bytes."""

    def __init__(self, server: ServerUnderTest, every: float = 0.2) -> None:
        self.server, self.every = server, every
        self.peak = 0
        self.gpu_peak: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        self.peak = max(self.peak, self.server.rss_bytes())
        gpu = self.server.gpu_bytes()
        if gpu is not None:
            self.gpu_peak = max(self.gpu_peak or 0, gpu)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.every)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
