"""What a model process inherits from the template it is forked from (see ``zygote._settle``).

Every anonymous page the template holds counts again in each model process's resident memory, so
the template imports only what every model needs: a model with a plain ``execute`` runs without
asyncio (megabytes per process), and one with ``async def execute`` imports it in its own process
and still answers.  Checked on a real server, from the libraries ``/proc/<pid>/maps`` shows each
process has loaded (asyncio loads its C part, ``_asyncio``, when imported).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.models import identity_config, write_model
from tests.support.server import ServerProcess

PID_PY = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    {prefix}def execute(self, requests):
        out = np.array([os.getpid()], dtype=np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]) for _ in requests]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("template")
    write_model(repo, "plain", identity_config("plain", "TYPE_INT64"), PID_PY.format(prefix=""))
    write_model(repo, "coroutine", identity_config("coroutine", "TYPE_INT64"), PID_PY.format(prefix="async "))
    with ServerProcess([repo]) as served:
        yield served


def _pid_of(server: ServerProcess, model: str) -> int:
    """The pid of the model process that answers ``model`` (the model reports it)."""
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("INPUT0", [1], "INT64")
        tensor.set_data_from_numpy(np.array([0], dtype=np.int64))
        output = client.infer(model, [tensor]).as_numpy("OUTPUT0")
    assert output is not None
    return int(output[0])


def _loaded(pid: int, library: str) -> bool:
    return any(Path(line.split()[-1]).name.startswith(library) for line in _maps(pid) if "/" in line)


def _maps(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/maps").read_text().splitlines()


def test_a_plain_models_process_holds_no_asyncio(server: ServerProcess) -> None:
    pid = _pid_of(server, "plain")
    assert server.process is not None and pid != server.process.pid  # answered by a model process
    assert _loaded(pid, "_pickle")  # the check sees the C modules a model process does load
    assert not _loaded(pid, "_asyncio")
    assert not _loaded(pid, "_ssl")


def test_an_async_models_process_imports_asyncio_itself_and_answers(server: ServerProcess) -> None:
    pid = _pid_of(server, "coroutine")
    assert pid != _pid_of(server, "plain")
    assert _loaded(pid, "_asyncio")
