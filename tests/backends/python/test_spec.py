"""``ProcessOptions``: the config parameters that decide how a Python model is isolated."""

from __future__ import annotations

from pathlib import Path

import pytest
from naiad.backends.python.spec import ProcessOptions
from naiad.core.errors import InvalidArgumentError
from tritonclient.grpc import model_config_pb2 as mc


def _config(**parameters: str) -> mc.ModelConfig:
    config = mc.ModelConfig(name="m", backend="python")
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return config


def test_model_processes_are_the_default_and_limits_are_read() -> None:
    assert ProcessOptions.of(_config(), Path("/models/m")) == ProcessOptions()
    options = ProcessOptions.of(
        _config(
            NAIAD_MEMORY_LIMIT_MIB="256",
            NAIAD_EXECUTION_TIMEOUT_SECONDS="2.5",
            EXECUTION_ENV_PATH="$$TRITON_MODEL_DIRECTORY/env.tar.gz",
        ),
        Path("/models/m"),
    )
    assert options == ProcessOptions(False, 256 << 20, 2.5, Path("/models/m/env.tar.gz"))
    assert ProcessOptions.of(_config(NAIAD_INSTANCE_PROCESSES=" FALSE "), Path("/m")).in_process


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"NAIAD_INSTANCE_PROCESSES": "maybe"}, "must be 'true' or 'false', not 'maybe'"),
        ({"NAIAD_MEMORY_LIMIT_MIB": "-5"}, "NAIAD_MEMORY_LIMIT_MIB must be a positive number, not '-5'"),
        ({"NAIAD_EXECUTION_TIMEOUT_SECONDS": "soon"}, "must be a positive number, not 'soon'"),
        (
            {"NAIAD_INSTANCE_PROCESSES": "false", "NAIAD_MEMORY_LIMIT_MIB": "100"},
            "runs the model inside the server, where NAIAD_MEMORY_LIMIT_MIB",
        ),
    ],
)
def test_malformed_options_fail_the_load_naming_the_parameter(parameters: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match="model 'm'") as caught:
        ProcessOptions.of(_config(**parameters), Path("/models/m"))
    assert message in caught.value.message
