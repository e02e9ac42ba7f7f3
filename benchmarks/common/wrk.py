"""One wrk run: requests/s and latency percentiles, with every failed response an error.

wrk counts a 4xx/5xx answer as a completed request, so a benchmark that did not check would happily
report the speed of error messages; here any non-2xx response fails the run.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from benchmarks.common.references import SHARED

#: The reference ``add_sub`` JSON body (``../shared/reference/add_sub.lua``).
ADD_SUB_SCRIPT = SHARED / "add_sub.lua"

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def ms(text: str) -> float:
    """wrk's latency text (``850.12us``, ``1.20ms``, ``2s``) in milliseconds."""
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if match is None:
        raise ValueError(f"not a wrk latency: {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _find(pattern: str, text: str) -> str:
    match = re.search(pattern, text, re.M)
    if match is None:
        raise ValueError(f"wrk output has no {pattern!r}:\n{text}")
    return match.group(1)


def wrk(url: str, script: Path, duration: int, connections: int) -> dict[str, float]:
    """``{"rps", "p50", "p99"}`` (latencies in ms) of one single-threaded wrk run against ``url``."""
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    failed = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if failed:
        raise RuntimeError(f"{url}: {failed.group(1)} failed responses")
    return {
        "rps": float(_find(r"Requests/sec:\s+([\d.]+)", out)),
        "p50": ms(_find(r"^\s+50%\s+(\S+)", out)),
        "p99": ms(_find(r"^\s+99%\s+(\S+)", out)),
    }


def wrk_add_sub(base_url: str, duration: int, connections: int) -> dict[str, float]:
    """:func:`wrk` with the reference ``add_sub`` body against a server's ``add_sub`` model."""
    return wrk(f"{base_url}/v2/models/add_sub/infer", ADD_SUB_SCRIPT, duration, connections)
