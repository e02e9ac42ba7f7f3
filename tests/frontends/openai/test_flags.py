"""``--openai-port`` and ``--openai-address``: off unless asked for, checked like the other ports."""

from __future__ import annotations

import pytest
from naiad.cli import parse_settings


def test_the_openai_frontend_is_off_by_default() -> None:
    settings = parse_settings(["--model-repository=/models"])
    assert settings.openai_port is None and settings.openai_address == "0.0.0.0"


def test_the_openai_port_and_address_are_taken() -> None:
    settings = parse_settings(["--model-repository=/models", "--openai-port", "9000", "--openai-address=127.0.0.1"])
    assert (settings.openai_port, settings.openai_address) == (9000, "127.0.0.1")


def test_a_bad_openai_port_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_settings(["--model-repository=/models", "--openai-port=70000"])
    assert info.value.code == 2 and "--openai-port" in capsys.readouterr().err
