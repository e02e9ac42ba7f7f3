"""``naiad.core.allocator``: with the thresholds pinned, tensor-sized blocks freed by one request are
reused by the next instead of being faulted in again.

Each case runs in a fresh interpreter (the thresholds are process-wide and the test runner's own heap
must not matter).  The workload is the one that made the server slow: two 600 kB buffers alive at once,
then both freed, request after request.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_CYCLES = textwrap.dedent(
    """
    import resource, sys
    from naiad.core.allocator import pin_thresholds

    if sys.argv[1] == "pin" and not pin_thresholds():
        sys.exit("pin_thresholds() returned False")

    def request():
        received, response = bytearray(600_000), bytearray(600_000)  # zero-filled: every page touched
        del received, response

    for _ in range(5):
        request()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(200):
        request()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 200)
    """
)


def _faults_per_request(mode: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _CYCLES, mode], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux-only")
def test_pinned_thresholds_stop_page_faults_on_tensor_sized_blocks() -> None:
    default = _faults_per_request("default")
    pinned = _faults_per_request("pin")
    assert default > 100, (
        f"glibc's defaults fault {default} pages per request here: the case is not reproduced"
    )
    assert pinned < 5, f"{pinned} page faults per request with the thresholds pinned"
