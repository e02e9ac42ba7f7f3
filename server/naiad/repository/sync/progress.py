"""One self-rewriting status line on a terminal; nothing at all when stderr is a pipe or a log."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


def human_size(count: float) -> str:
    """``1.5 GiB``-style sizes for people."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    while count >= 1024 and len(units) > 1:
        count /= 1024
        units.pop(0)
    return f"{count:.1f} {units[0]}" if units[0] != "B" else f"{int(count)} B"


class Progress:
    """Counts objects and bytes from the download threads; redraws at most ten times a second."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total_objects = 0
        self.total_bytes = 0
        self.objects = 0
        self.bytes = 0
        self._started = time.monotonic()
        self._drawn = 0.0
        self._lock = threading.Lock()

    def phase(self, text: str) -> None:
        if self.enabled:
            self.stream.write(f"\r\x1b[K{text}")
            self.stream.flush()

    def plan(self, objects: int, size: int) -> None:
        self.total_objects, self.total_bytes = objects, size
        self._started = time.monotonic()

    def advance(self, size: int, done: bool) -> None:
        with self._lock:
            self.bytes += size
            self.objects += int(done)
            now = time.monotonic()
            if not self.enabled or (now - self._drawn < 0.1 and not done):
                return
            self._drawn = now
            rate = self.bytes / max(now - self._started, 1e-6)
            self.stream.write(
                f"\r\x1b[Kdownloading {self.objects}/{self.total_objects} objects, "
                f"{human_size(self.bytes)}/{human_size(self.total_bytes)} ({human_size(rate)}/s)"
            )
            self.stream.flush()

    def finish(self) -> None:
        if self.enabled:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
