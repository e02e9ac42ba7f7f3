"""Triton's ``EXECUTION_ENV_PATH``: a model runs with its own environment's Python and packages.

The environment is built here as a user would: a venv holding a small pure-Python package the
server's own environment lacks, packed as a ``.tar.gz`` next to the model (and, for the folder form,
left unpacked).
"""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

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


def _malicious(archive: Path, entries: list[tuple[str, bytes | str]]) -> None:
    """A ``.tar.gz`` of ``entries``: (name, file contents, or a symbolic link's target as text)."""
    with tarfile.open(archive, "w:gz") as tar:
        for name, body in entries:
            info = tarfile.TarInfo(name)
            if isinstance(body, str):
                info.type, info.linkname = tarfile.SYMTYPE, body
                tar.addfile(info)
            else:
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))


def test_an_archive_that_would_write_outside_its_folder_is_refused_whole(tmp_path: Path) -> None:
    """NVIDIA's qa ``L0_backend_python/env`` zip-slip cases (an entry under ``..``, an absolute one)
    and a write through a link to outside: the model fails to load with the reason, nothing lands
    outside, and the server serves its other models."""
    outside = tmp_path / "outside"
    outside.mkdir()
    cases = {
        "dotdot": ([(f"../../../../../../../..{outside}/dotdot", b"x"), ("bin/activate", b"")], "Path contains '..'"),
        "absolute": ([(f"{outside}/absolute", b"x"), ("bin/activate", b"")], "Path is absolute"),
        "through_link": ([("lib", str(outside)), ("lib/through_link", b"x")], "outside the destination"),
    }
    repo = tmp_path / "repo"
    for name, (entries, _) in cases.items():
        model = write_model(
            repo, name, CONFIG.format(name=name, count=1, path="$$TRITON_MODEL_DIRECTORY/env.tar.gz"), PROBE_PY
        )
        _malicious(model / "env.tar.gz", entries)
    write_model(repo, "plain", CONFIG.format(name="plain", count=1, path=str(build_environment(tmp_path / "env"))), PROBE_PY)
    with ServerProcess([repo], ["--model-control-mode=explicit"]) as server:
        with httpclient.InferenceServerClient(server.http_url) as client:
            for name, (_, reason) in cases.items():
                with pytest.raises(InferenceServerException) as caught:
                    client.load_model(name)
                assert "cannot be extracted" in str(caught.value) and reason in str(caught.value)
                assert not client.is_model_ready(name)
            client.load_model("plain")
            assert _ask(client, "plain")[0] == "hello from the custom environment"
    assert list(outside.iterdir()) == []
