"""``make fuzz``: the fuzz tests in their full profile (more than 10,000 generated requests), bounded in
time, then the run's figures; the last line is ``N requests, M 5xx, K crashes``.

The tests run in a child pytest (the profile is read when they are imported), which writes the tally
(:mod:`tests.fuzz.tally`) where ``NAIAD_FUZZ_REPORT`` says once the server has been checked after the
run.  Exit status: pytest's, or 124 when the run passed its time bound.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.fuzz.conftest import RSS_GROWTH_LIMIT
from tests.fuzz.tally import Tally

ROOT = Path(__file__).resolve().parents[2]
#: The whole run's bound (it takes a few minutes on two cores).
TIME_LIMIT_S = 1500
MIB = 1024 * 1024


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="naiad-fuzz-") as scratch:
        report = Path(scratch) / "tally.json"
        env = dict(os.environ, NAIAD_FUZZ="full", NAIAD_FUZZ_REPORT=str(report))
        started = time.monotonic()
        command = [sys.executable, "-m", "pytest", "tests/fuzz", "-q", "-p", "no:cacheprovider"]
        try:
            status = subprocess.run(command, cwd=ROOT, env=env, timeout=TIME_LIMIT_S, check=False).returncode
        except subprocess.TimeoutExpired:
            print(f"the fuzz run passed its bound of {TIME_LIMIT_S} s")
            status = 124
        elapsed = time.monotonic() - started
        if not report.exists():
            print(f"no tally: the run ended before its server was checked ({elapsed:.0f} s)")
            return status or 1
        tally = Tally.load(report)
    growth = tally.rss_end - tally.rss_start
    print(f"{elapsed:.0f} s; server RSS {tally.rss_start / MIB:.1f} -> {tally.rss_end / MIB:.1f} MiB "
          f"(growth {growth / MIB:+.1f} MiB, bound {RSS_GROWTH_LIMIT / MIB:.0f} MiB)")  # fmt: skip
    print(f"answers real Triton 2.51 also gives as server errors (501 unsupported, 500 unknown model load): "
          f"{tally.tritons_own}")  # fmt: skip
    for example in tally.examples:
        print(f"  {example}")
    print(tally.line())
    return status


if __name__ == "__main__":
    sys.exit(main())
