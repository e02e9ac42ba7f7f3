"""Triton's log lines, and the logging extension: log settings that change while the server runs.

Lines look like tritonserver's: ``I1121 20:19:06.136285 32154 manager.py:312] "message"`` (UTC, level
letter E/W/I, pid, source file and line, the message JSON-quoted so that one record is one line, as
Triton does unless ``TRITON_SERVER_ESCAPE_LOG_MESSAGES=0``; a record marked ``verbatim`` (a table)
keeps its lines, one with a ``heading`` (a model configuration) has only that line quoted), or with
``--log-format ISO8601`` ``2026-11-21T20:19:06Z I 32154 manager.py:312] "message"``; ``--log-format
json`` (Naiad) writes one JSON object per line for log pipelines.  Verbose lines are Python's DEBUG
records of the server's own loggers (``log_verbose_level`` N shows records down to ``DEBUG + 1 - N``)
and print with Triton's letter ``I``.

The settings live here, process-wide like Triton's global logger: :func:`configure` installs them at
start, :func:`document` and :func:`update` serve ``GET/POST /v2/logging`` and gRPC LogSettings.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, TextIO

import orjson

from naiad.core.errors import InvalidArgumentError, UnsupportedError
from naiad.settings import ServerSettings

FORMATS = ("default", "ISO8601", "json")
_LETTERS = {logging.ERROR: "E", logging.WARNING: "W"}
_BOOLEANS = ("log_info", "log_warning", "log_error")


@dataclass(frozen=True, slots=True)
class LogSettings:
    """Triton's log settings (``log_file`` empty: the console, see :class:`ConsoleHandler`)."""

    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"


class TritonFormatter(logging.Formatter):
    """tritonserver's line layout, ``default`` or ``ISO8601``."""

    def __init__(self, iso8601: bool) -> None:
        super().__init__()
        self.iso8601 = iso8601
        self.escape = os.environ.get("TRITON_SERVER_ESCAPE_LOG_MESSAGES", "1") != "0"
        self.pid = os.getpid()

    def format(self, record: logging.LogRecord) -> str:
        message = _message(self, record)
        heading = getattr(record, "heading", None)
        if heading is not None:  # a heading line, then an object's lines as they are (a config)
            message = f"{orjson.dumps(heading).decode() if self.escape else heading}\n{message}"
        elif self.escape and not getattr(record, "verbatim", False):  # (tables, the parser's lines)
            message = orjson.dumps(message).decode()
        letter = _LETTERS.get(record.levelno, "E" if record.levelno > logging.ERROR else "I")
        when = time.gmtime(record.created)
        where = f"{self.pid} {record.filename}:{record.lineno}]"
        if self.iso8601:
            return f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', when)} {letter} {where} {message}"
        micros = int(record.created % 1 * 1_000_000)
        return f"{letter}{time.strftime('%m%d %H:%M:%S', when)}.{micros:06d} {where} {message}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``timestamp`` (UTC, µs), ``level``, ``logger``, ``pid``, ``file``,
    ``line``, ``message`` and, for an exception, ``exception`` (the formatted traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        document: dict[str, Any] = {
            "timestamp": f"{when}.{int(record.created % 1 * 1_000_000):06d}Z",
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "file": record.filename,
            "line": record.lineno,
            "message": record.getMessage(),
        }
        heading = getattr(record, "heading", None)
        if heading is not None:
            document["message"] = f"{heading}\n{document['message']}"
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(document).decode()


class ConsoleHandler(logging.StreamHandler[TextIO]):
    """Triton's console: information and verbose lines on standard output, warnings and errors on
    standard error (a log collector that reads the streams apart then sees Triton's split)."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    def emit(self, record: logging.LogRecord) -> None:
        # (under the handler's lock: ``Handler.handle`` takes it around ``emit``)
        self.stream = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
        super().emit(record)


class _Gate(logging.Filter):
    """Lets a record through by its level and the current settings (read at each record)."""

    def __init__(self, settings: LogSettings) -> None:
        super().__init__()
        self.settings = settings

    def filter(self, record: logging.LogRecord) -> bool:
        settings = self.settings
        level = record.levelno
        if level >= logging.ERROR:
            return settings.log_error
        if level >= logging.WARNING:
            return settings.log_warning
        if level >= logging.INFO:
            return settings.log_info
        # Verbose lines are the server's own, as tritonserver's are: the libraries' debug records
        # (grpc's "Loaded running loop" per call, botocore's every request) would drown them.
        return (
            settings.log_verbose_level > 0
            and level >= _verbose_threshold(settings.log_verbose_level)
            and (record.name == "naiad" or record.name.startswith("naiad."))
        )


class LogControl:
    """The root logger's one handler, its format and its gate, changeable at run time."""

    def __init__(self, settings: LogSettings) -> None:
        self.settings = settings
        if settings.log_file:
            self._handler: logging.Handler = logging.FileHandler(settings.log_file, mode="a")
        else:
            self._handler = ConsoleHandler()
        self._gate = _Gate(settings)
        self._handler.addFilter(self._gate)
        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.addHandler(self._handler)
        self._apply()

    def update(self, changes: Mapping[str, Any]) -> LogSettings:
        """Apply a logging extension update: Triton's keys, values of Triton's types."""
        if "log_file" in changes:
            raise UnsupportedError("log file location can not be updated through network protocol")
        flags: dict[str, Any] = {}
        for key in _BOOLEANS:
            if key in changes:
                value = changes[key]
                if not isinstance(value, bool):
                    raise InvalidArgumentError("attempt to access JSON non-boolean as boolean")
                flags[key] = value
        settings = replace(self.settings, **flags)
        if "log_verbose_level" in changes:
            level = changes["log_verbose_level"]
            if isinstance(level, bool) or not isinstance(level, int) or level < 0:
                raise InvalidArgumentError("attempt to access JSON non-unsigned-integer as unsigned-integer")
            settings = replace(settings, log_verbose_level=level)
        if "log_format" in changes:
            log_format = changes["log_format"]
            if not isinstance(log_format, str):
                raise InvalidArgumentError("attempt to access JSON non-string as string")
            if log_format not in FORMATS:
                raise InvalidArgumentError(f"invalid argument for log_format, got: {log_format}")
            settings = replace(settings, log_format=log_format)
        self.settings = self._gate.settings = settings
        self._apply()
        return settings

    def _apply(self) -> None:
        """Format, and the root level: the lowest one the gate may let through (cheap early drops)."""
        settings = self.settings
        log_format = settings.log_format
        formatter = JsonFormatter() if log_format == "json" else TritonFormatter(log_format == "ISO8601")
        self._handler.setFormatter(formatter)
        if settings.log_verbose_level:
            level = _verbose_threshold(settings.log_verbose_level)
        elif settings.log_info:
            level = logging.INFO
        elif settings.log_warning:
            level = logging.WARNING
        else:
            level = logging.ERROR
        logging.getLogger().setLevel(level)


_control: LogControl | None = None


def configure_server(settings: ServerSettings) -> LogControl:
    """Triton's log lines and the ``--log-*`` settings of ``naiad serve`` (each process, at start)."""
    return configure(
        LogSettings(
            str(settings.log_file) if settings.log_file else "",
            settings.log_info,
            settings.log_warning,
            settings.log_error,
            settings.log_verbose,
            settings.log_format,
        )
    )


def configure(settings: LogSettings) -> LogControl:
    """Install ``settings`` as the process's logging (once, at start)."""
    global _control
    _control = LogControl(settings)
    return _control


def document() -> dict[str, Any]:
    """The current settings as Triton reports them."""
    settings = _control.settings if _control is not None else LogSettings()
    return {
        "log_file": settings.log_file,
        "log_info": settings.log_info,
        "log_warning": settings.log_warning,
        "log_error": settings.log_error,
        "log_verbose_level": settings.log_verbose_level,
        "log_format": settings.log_format,
    }


def update(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Apply a settings update and return the settings now in force."""
    if _control is None:
        raise UnsupportedError("logging is not configured")
    _control.update(changes)
    return document()


def _verbose_threshold(level: int) -> int:
    return logging.DEBUG + 1 - level


def _message(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    message = record.getMessage()
    if record.exc_info:
        message += "\n" + formatter.formatException(record.exc_info)
    return message
