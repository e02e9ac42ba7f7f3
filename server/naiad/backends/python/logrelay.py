"""A model process's side channel: its log records, handled by the engine's logging as if they were
its own, and the engine's questions that must not wait for an execution to end.

The engine's log settings change at run time (``/v2/logging``: format, verbose level, info on or
off, a log file), so a model process does not format anything: every record goes, pickled, through a
socket of its own to the engine, which hands it to the logger it was made for.  The same socket carries
the model process's custom metrics (:mod:`naiad.backends.python.custom_metrics`), which, like log
records, may come at any time, from any thread, without a reply.  ``pb_utils.Logger``
lines then look, and are filtered, exactly like the engine's, and follow every settings change at once.

The other way, the engine asks what a thread of the model process answers while ``execute`` may be
running on its main thread (the socket the executions use is read only between them): whether the
model is ready (its ``is_ready()``).  Questions and answers are framed as records are.
"""

from __future__ import annotations

import logging
import os
import pickle
import struct
from collections.abc import Callable
from typing import Any

_HEADER = struct.Struct("!I")


class PipeHandler(logging.Handler):
    """In a model process: writes each record to the engine's pipe (``handle`` holds the lock, so
    records of several threads never interleave)."""

    def __init__(self, fd: int) -> None:
        super().__init__(logging.NOTSET)
        self._fd = fd

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = dict(record.__dict__)
            fields["msg"] = record.getMessage()
            fields["args"] = None
            if record.exc_info:
                fields["exc_text"] = logging.Formatter().formatException(record.exc_info)
            fields["exc_info"] = None
            self._write(fields)
        except Exception:
            self.handleError(record)

    def send(self, message: tuple[Any, ...]) -> None:
        """Send something other than a record (custom metrics), between whole records."""
        with self.lock:  # type: ignore[union-attr]
            self._write(message)

    def _write(self, message: Any) -> None:
        data = memoryview(frame(message))
        while data:
            data = data[os.write(self._fd, data) :]


def frame(message: Any) -> bytes:
    """``message`` as it crosses the side channel: its pickle's length, then the pickle."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(payload)) + payload


def serve_questions(fd: int, answer: Callable[[Any], None]) -> None:
    """In a model process, on a thread of its own: hand each question the engine sends on ``fd`` to
    ``answer``, until the engine closes its end."""
    buffer = bytearray()
    while True:
        try:
            data = os.read(fd, 1 << 12)
        except OSError:
            return
        if not data:
            return
        buffer += data
        while len(buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(buffer)
            if len(buffer) < _HEADER.size + size:
                break
            question = pickle.loads(memoryview(buffer)[_HEADER.size : _HEADER.size + size])
            del buffer[: _HEADER.size + size]
            answer(question)


def install(fd: int) -> PipeHandler:
    """Send every record of this process to the engine through ``fd``; the handler doing it."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    pipe = PipeHandler(fd)
    root.addHandler(pipe)
    root.setLevel(logging.DEBUG)  # the engine's settings decide what is shown
    return pipe


def relay(fd: int, buffer: bytearray, other: Callable[[Any], None]) -> bool:
    """In the engine: handle the records that arrived on ``fd`` (``buffer`` keeps a partial one),
    and pass the other messages to ``other``; False once the model process closed its end."""
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        return True
    if not data:
        return False
    buffer += data
    while len(buffer) >= _HEADER.size:
        (size,) = _HEADER.unpack_from(buffer)
        if len(buffer) < _HEADER.size + size:
            break
        fields: Any = pickle.loads(memoryview(buffer)[_HEADER.size : _HEADER.size + size])
        del buffer[: _HEADER.size + size]
        if not isinstance(fields, dict):
            other(fields)
            continue
        record = logging.makeLogRecord(fields)
        logging.getLogger(record.name).handle(record)
    return True
