"""``--backend-config`` resolved per backend as Triton core resolves it (the settings alone; what the
backends do with them is ``tests/backends/onnxruntime/test_backend_config.py``'s)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from naiad.backends.settings import BackendSettings, parse_option


def test_a_backend_gets_the_globals_then_its_own_then_the_defaults() -> None:
    settings = BackendSettings(
        ["default-max-batch-size=7", "z=1", "onnxruntime,z=2", "python,a=0", "default-max-batch-size=8"],
        backend_directory=Path("/b"),
    )
    onnx = settings.of("onnxruntime")
    assert onnx == {
        "auto-complete-config": "true",
        "backend-directory": "/b",
        "default-max-batch-size": "8",  # the last of a name wins
        "min-compute-capability": "6.000000",
        "z": "2",  # a backend's own over the global
    }
    assert list(onnx) == sorted(onnx)
    python = settings.of("python")
    assert (python["a"], python["z"]) == ("0", "1")
    # without the setting, Triton's default comes last, after the sorted ones
    bare = BackendSettings(auto_complete=False).of("pytorch")
    assert list(bare.items())[-1] == ("default-max-batch-size", "4")
    assert bare["auto-complete-config"] == "false"


def test_the_servers_globals_override_the_users() -> None:
    settings = BackendSettings(["auto-complete-config=false", "backend-directory=/x"])
    assert settings.of("onnxruntime")["auto-complete-config"] == "true"
    assert settings.of("onnxruntime")["backend-directory"] == ""
    # (a backend's own still wins, as in Triton: the server's are global ones)
    mine = BackendSettings(["onnxruntime,min-compute-capability=XX"])
    assert mine.of("onnxruntime")["min-compute-capability"] == "XX"
    assert mine.of("python")["min-compute-capability"] == "6.000000"


def test_describe_is_the_json_a_backend_logs() -> None:
    described = BackendSettings(["onnxruntime,a=0"]).describe("onnxruntime")
    assert json.loads(described) == {"cmdline": BackendSettings(["onnxruntime,a=0"]).of("onnxruntime")}
    assert described.startswith('{"cmdline":{"a":"0","auto-complete-config":"true"')


def test_announce_says_which_default_was_overridden(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="naiad.backends.settings")
    settings = BackendSettings(["python,default-max-batch-size=7", "default-max-batch-size=8"])
    settings.announce("python")
    settings.announce("onnxruntime")
    settings = BackendSettings()
    settings.announce("onnxruntime")
    assert [r.getMessage() for r in caplog.records] == [
        "Found overwritten default setting: default-max-batch-size,7",
        "Found overwritten default setting: default-max-batch-size,8",
        "Adding default backend config setting: default-max-batch-size,4",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("onnxruntime,default-max-batch-size=5", ("onnxruntime", "default-max-batch-size", "5")),
        ("default-max-batch-size=5", ("", "default-max-batch-size", "5")),
        ("a,b,c=d=e", ("a", "b,c", "d=e")),
    ],
)
def test_parse_option(text: str, expected: tuple[str, str, str]) -> None:
    assert parse_option(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (",default-max-batch-size=3", "No backend specified. --backend-config option format is"),
        ("default-max-batch-size=", "--backend-config option format is '<backend name>,<setting>=<value>'"),
        ("default-max-batch-size", "--backend-config option format is '<backend name>,<setting>=<value>'"),
        ("onnxruntime,=3", "--backend-config option format is '<backend name>,<setting>=<value>'"),
    ],
)
def test_parse_option_refuses_what_triton_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace(".", r"\.")) as error:
        parse_option(text)
    assert str(error.value).endswith(f"Got {text}")
