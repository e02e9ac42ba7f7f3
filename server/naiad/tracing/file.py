"""Triton's JSON trace file: one array of records, written as tritonserver writes it.

Records are ``{"id", "model_name", "model_version", "request_id"?}``, ``{"id", "timestamps": [{"name",
"ns"}]}`` (one per timestamp) and ``{"id", "activity", "tensor"}``.  With ``log_frequency`` N, every N
traces go to a file of their own, ``<trace_file>.<index>``; otherwise traces are appended to
``<trace_file>`` itself, whose array is closed when the server stops.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import IO, Any

import orjson

log = logging.getLogger("naiad.tracing")


class TraceFile:
    """The trace output of one ``trace_file`` path; written on the event loop (small, local writes)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.index = 0
        self._main: IO[bytes] | None = None

    def save(self, records: list[dict[str, Any]], indexed: bool) -> None:
        """Append ``records`` to the main file, or write them as the next ``<path>.<index>`` file."""
        if not records:
            return
        body = b",".join(orjson.dumps(record) for record in records)
        try:
            if indexed:
                name = f"{self.path}.{self.index}"
                self.index += 1
                Path(name).write_bytes(b"[" + body + b"]")
            elif self._main is None:
                self._main = open(self.path, "wb")
                self._main.write(b"[" + body)
            else:
                self._main.write(b"," + body)
            if self._main is not None:
                self._main.flush()
        except OSError as error:
            log.error("failed creating trace file: %s", error)

    def close(self) -> None:
        if self._main is not None:
            self._main.write(b"]")
            self._main.close()
            self._main = None
