"""Triton's log line layouts, JSON lines, and settings that gate records as they change."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from naiad.core.errors import InvalidArgumentError, UnsupportedError
from naiad.log_settings import JsonFormatter, LogControl, LogSettings, TritonFormatter


def _record(level: int, message: str, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord("naiad.test", level, "/src/manager.py", 312, message, (), exc_info)


def test_default_and_iso8601_lines_are_tritons() -> None:
    record = _record(logging.WARNING, 'say "hi"\nagain')
    assert re.fullmatch(
        r'W\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ manager\.py:312\] "say \\"hi\\"\\nagain"',
        TritonFormatter(iso8601=False).format(record),
    )
    assert re.fullmatch(
        r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ manager\.py:312\] "loaded"',
        TritonFormatter(iso8601=True).format(_record(logging.DEBUG, "loaded")),  # verbose prints as I
    )
    assert TritonFormatter(iso8601=False).format(_record(logging.ERROR, "x")).startswith("E")


def test_escaping_can_be_turned_off_as_in_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_SERVER_ESCAPE_LOG_MESSAGES", "0")
    assert TritonFormatter(iso8601=False).format(_record(logging.INFO, "plain")).endswith("] plain")


def test_json_lines_carry_the_record_and_its_exception() -> None:
    line = JsonFormatter().format(_record(logging.ERROR, "failed", exc=True))
    assert "\n" not in line
    document = json.loads(line)
    assert document["level"] == "ERROR" and document["message"] == "failed"
    assert (document["logger"], document["file"], document["line"]) == ("naiad.test", "manager.py", 312)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", document["timestamp"])
    assert "ValueError: boom" in document["exception"]


@pytest.fixture
def control(tmp_path: Path) -> Iterator[LogControl]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    control = LogControl(LogSettings(log_file=str(tmp_path / "server.log")))
    yield control
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_settings_gate_records_at_once(control: LogControl, tmp_path: Path) -> None:
    log = logging.getLogger("naiad.test")

    def emit(tag: str) -> None:
        log.debug("verbose %s", tag)
        log.info("info %s", tag)
        log.warning("warning %s", tag)
        log.error("error %s", tag)

    emit("a")
    control.update({"log_verbose_level": 1, "log_info": False, "log_format": "json"})
    emit("b")
    control.update({"log_verbose_level": 0, "log_info": True, "log_warning": False, "log_error": False})
    emit("c")
    lines = (tmp_path / "server.log").read_text().splitlines()
    shown = [line.rsplit('"', 2)[-2] if not line.startswith("{") else json.loads(line)["message"] for line in lines]
    assert shown == ["info a", "warning a", "error a", "verbose b", "warning b", "error b", "info c"]


def test_invalid_updates_change_nothing(control: LogControl) -> None:
    for bad, error in (
        ({"log_file": "/x"}, UnsupportedError),
        ({"log_info": "true"}, InvalidArgumentError),
        ({"log_verbose_level": -1}, InvalidArgumentError),
        ({"log_verbose_level": True}, InvalidArgumentError),
        ({"log_format": "xml"}, InvalidArgumentError),
    ):
        with pytest.raises(error):
            control.update(bad)
    assert control.settings == LogSettings(log_file=control.settings.log_file)
