"""Triton's ``EXECUTION_ENV_PATH``: a model runs with its own environment's Python and packages.

The environment is built here as a user would: a venv holding a small pure-Python package the
server's own environment lacks, packed as a ``.tar.gz`` next to the model (and, for the folder form,
left unpacked).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from tests.support.models import write_model
from tests.support.server import ServerProcess

PACKAGE = "naiad_env_probe"

PROBE_PY = """
import os
import sys

import numpy as np
import naiad_env_probe
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        seen = [naiad_env_probe.GREETING, sys.prefix, str(os.getpid())]
        out = pb_utils.Tensor("OUTPUT0", np.array([s.encode() for s in seen], dtype=object))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_STRING dims: [ 3 ] }}]
instance_group [{{ kind: KIND_CPU count: {count} }}]
parameters {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{path}" }} }}
"""


def build_environment(folder: Path) -> Path:
    """A venv (no pip: nothing to download) with ``naiad_env_probe`` in its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    package = folder / "lib" / version / "site-packages" / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('GREETING = "hello from the custom environment"\n')
    return folder


def pack(folder: Path, archive: Path) -> Path:
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=".")
    return archive


def _ask(client: httpclient.InferenceServerClient, model: str) -> list[str]:
    tensor = httpclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.zeros(1, dtype=np.float32))
    output = client.infer(model, [tensor]).as_numpy("OUTPUT0")
    assert output is not None
    return [value.decode() for value in output]


def test_models_run_with_their_packed_or_unpacked_execution_environment(tmp_path: Path) -> None:
    assert importlib.util.find_spec(PACKAGE) is None  # the server's own environment lacks it
    environment = build_environment(tmp_path / "built-env")
    repo = tmp_path / "repo"
    packed = write_model(
        repo,
        "packed",
        CONFIG.format(name="packed", count=2, path="$$TRITON_MODEL_DIRECTORY/env.tar.gz"),
        PROBE_PY,
    )
    pack(environment, packed / "env.tar.gz")
    write_model(repo, "unpacked", CONFIG.format(name="unpacked", count=1, path=str(environment)), PROBE_PY)
    with ServerProcess([repo]) as server:
        with httpclient.InferenceServerClient(server.http_url, concurrency=2) as client:
            greeting, prefix, _ = _ask(client, "unpacked")
            assert greeting == "hello from the custom environment"
            assert Path(prefix) == environment

            answers = {tuple(_ask(client, "packed")) for _ in range(8)}
            greetings = {answer[0] for answer in answers}
            prefixes = {answer[1] for answer in answers}
            assert greetings == {"hello from the custom environment"}
            # both instances run the one extracted copy, not the server's environment
            assert len(prefixes) == 1
            (extracted,) = prefixes
            assert extracted != sys.prefix and Path(extracted) != environment
            assert (Path(extracted) / "lib").is_dir()
        assert server.stop() == 0
