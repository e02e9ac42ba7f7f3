"""``naiad perf`` against NVIDIA's real Triton 2.51 (``../shared/reference/triton.sh``): users measure both.

Skipped when the reference Triton is not installed (its virtual environment is built on first use of
triton.sh, which takes minutes: not something ``make test`` should do) or does not start.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import EXAMPLES, ROOT, free_port
from tests.tools.perf.test_perf_command import CSV_HEADER, FAST, perf

TRITON_SH = ROOT.parent / "shared" / "reference" / "triton.sh"
TRITON_VENV = Path(os.environ.get("NAIAD_REF_VENV", Path.home() / ".cache" / "naiad-reference" / "triton"))


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    if not TRITON_SH.exists() or not (TRITON_VENV / "bin" / "python").exists():
        pytest.skip("reference Triton not installed (run ../shared/reference/triton.sh once)")
    repo = tmp_path_factory.mktemp("triton-repo")
    shutil.copytree(EXAMPLES / "add_sub", repo / "add_sub")
    http, grpc_port, metrics = free_port(), free_port(), free_port()
    log = (tmp_path_factory.mktemp("triton-log") / "triton.log").open("wb")
    process = subprocess.Popen(
        ["bash", str(TRITON_SH), f"--model-repository={repo}", f"--http-port={http}", f"--grpc-port={grpc_port}",
         f"--metrics-port={metrics}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.skip("reference Triton did not start")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                time.sleep(0.3)
        yield f"127.0.0.1:{http}", f"127.0.0.1:{grpc_port}"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
        log.close()


def test_perf_measures_real_triton(triton: tuple[str, str], tmp_path: Path) -> None:
    http_url, grpc_url = triton
    for protocol, url, extra in (("http", http_url, []), ("grpc", grpc_url, ["--shared-memory", "system"])):
        out = tmp_path / f"{protocol}.csv"
        done = perf("-m", "add_sub", "-i", protocol, "-u", url, "--concurrency-range", "2", "-f", str(out),
                    *extra, *FAST)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Avg request latency:" in done.stdout and "Error count" not in done.stdout
        with out.open() as handle:
            rows = list(csv.reader(handle))
        assert rows[0] == CSV_HEADER and len(rows) == 2 and float(rows[1][1]) > 0
