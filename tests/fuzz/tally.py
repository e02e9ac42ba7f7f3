"""What a fuzz run counts: requests sent, server faults among the answers, crashes, and memory.

The property every generated request must hold: the answer is a client error with Triton's error body
(HTTP 4xx and ``{"error": "..."}``; gRPC INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, OUT_OF_RANGE,
RESOURCE_EXHAUSTED... with a message), or a success when a mutation happens to be a valid request.
A *fault* is a server error (HTTP 5xx, gRPC INTERNAL/UNKNOWN/UNAVAILABLE/DATA_LOSS), except where real
Triton 2.51 gives the same request the same server-side answer (:data:`TRITONS_OWN`, checked side by
side with ``shared/reference/triton.sh``): its UNSUPPORTED answers (HTTP 501, gRPC UNIMPLEMENTED, e.g. a
string sequence ID longer than 128 bytes) and its INTERNAL ``failed to load '<name>', failed to poll
from model repository`` (HTTP 500) for loading a model no repository holds.  Those are counted apart
(``tritons_own``).  A *crash* is a request whose connection dropped or that got no answer, or a server
process that exited.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: gRPC status names that are a client's error (the answer a malformed request should get).
CLIENT_CODES = frozenset(
    {
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "OUT_OF_RANGE",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "CANCELLED",
    }
)


#: (HTTP status, gRPC code, message pattern) of the server-side answers real Triton gives too.
TRITONS_OWN = (
    (501, "UNIMPLEMENTED", re.compile(r".+", re.DOTALL)),
    (500, "INTERNAL", re.compile(r"failed to load '.*', failed to poll from model repository", re.DOTALL)),
)


def _tritons_own(status: int | None, code: str | None, message: str) -> bool:
    return any(
        (status == s or code == c) and pattern.fullmatch(message) for s, c, pattern in TRITONS_OWN
    )


def rss_bytes(pid: int) -> int:
    """Resident memory of a process and its children (Python models in worker processes)."""
    total = 0
    for candidate in [pid, *_children(pid)]:
        try:
            status = Path(f"/proc/{candidate}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
        except OSError:
            continue
        for child in text.split():
            found += [int(child), *_children(int(child))]
    return found


@dataclass
class Tally:
    """Counts of one fuzz run; :meth:`line` is ``make fuzz``'s last line."""

    requests: int = 0
    faults: int = 0
    crashes: int = 0
    tritons_own: int = 0
    rss_start: int = 0
    rss_end: int = 0
    examples: list[str] = field(default_factory=list)

    def http(self, status: int, body: bytes, what: str) -> None:
        """Check one HTTP answer: a success, or a 4xx (or Triton's 501) with ``{"error": "..."}``."""
        self.requests += 1
        if status == 200:
            return
        try:
            document = json.loads(body)
        except ValueError:
            document = None
        error = document.get("error") if isinstance(document, dict) else None
        if status >= 500:
            if isinstance(error, str) and _tritons_own(status, None, error):
                self.tritons_own += 1
                return
            self._fault(f"{what}: HTTP {status} {body[:300]!r}")
        assert 400 <= status < 500, (what, status, body[:300])
        assert isinstance(error, str) and error, (what, status, body[:300])

    def grpc(self, code: str | None, message: str, what: str) -> None:
        """Check one gRPC answer: OK (``code`` None), or a client's error code with a message."""
        self.requests += 1
        if code is None:
            return
        if code == "UNIMPLEMENTED" or code not in CLIENT_CODES:
            if _tritons_own(None, code, message):
                self.tritons_own += 1
                return
            self._fault(f"{what}: {code} {message[:300]!r}")
        assert code in CLIENT_CODES and code != "UNIMPLEMENTED", (what, code, message[:300])
        assert message, (what, code)

    def crash(self, what: str) -> None:
        self.requests += 1
        self.crashes += 1
        self.examples.append(f"crash: {what}")

    def _fault(self, text: str) -> None:
        self.faults += 1
        if len(self.examples) < 20:
            self.examples.append(text)

    def line(self) -> str:
        return f"{self.requests} requests, {self.faults} 5xx, {self.crashes} crashes"

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Tally:
        data: dict[str, Any] = json.loads(path.read_text())
        return cls(**data)
