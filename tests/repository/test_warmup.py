"""``model_warmup``: samples run on every instance before READY; a failing sample leaves the version
UNAVAILABLE with the reason."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.repository.clients import RepositoryClient, error_of, rows
from tests.repository.conftest import connect
from tests.repository.models import write_marked
from tests.support.server import ServerProcess

ZERO_AND_RANDOM = """
model_warmup [
  { name: "zeros" batch_size: 2 count: 3 inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } },
  { name: "random" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 1 ] random_data: true } } }
]
"""

FROM_FILE = """
model_warmup [
  { name: "from_file" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 1 ] input_data_file: "input0" } } }
]
"""

MISSING_FILE = FROM_FILE.replace('"input0"', '"absent"')


@pytest.fixture(scope="module")
def protocol() -> str:
    """What is tested here does not depend on the protocol (the API is covered over both elsewhere)."""
    return "http"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, protocol: str) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("warmup-repo")
    write_marked(repo, "warm", "w", config_extra=ZERO_AND_RANDOM, max_batch_size=4)
    for name, value in (("good_file", 7), ("bad_file", -1)):
        model_dir = write_marked(repo, name, "f", config_extra=FROM_FILE)
        (model_dir / "warmup").mkdir()
        (model_dir / "warmup" / "input0").write_bytes(np.array([value], dtype="<i4").tobytes())
    write_marked(repo, "no_file", "n", config_extra=MISSING_FILE)
    with ServerProcess([repo], ["--model-control-mode=explicit"]) as process:
        yield process


@pytest.fixture
def client(protocol: str, server: ServerProcess) -> Iterator[RepositoryClient]:
    client = connect(protocol, server)
    yield client
    client.close()


def test_warmup_runs_every_sample_count_times_before_ready(client: RepositoryClient) -> None:
    client.load("warm")
    # 3 executions of "zeros" and 1 of "random" happened before the first request
    assert client.infer("warm", batched=True) == ("w:1", 5)


def test_warmup_from_a_data_file(client: RepositoryClient) -> None:
    client.load("good_file")
    assert client.infer("good_file") == ("f:1", 2)


def test_failing_warmup_leaves_the_version_unavailable_with_the_reason(client: RepositoryClient) -> None:
    status, message = error_of(client.load, "bad_file")
    assert status == "400"
    assert (
        "version 1 is at UNAVAILABLE state: failed to run warmup sample 'from_file': negative input"
        in message
    )
    (entry,) = rows(client.index(), "bad_file")
    assert entry["state"] == "UNAVAILABLE" and "failed to run warmup sample 'from_file'" in entry["reason"]
    assert not client.server_ready()
    client.unload("bad_file")


def test_missing_warmup_file_fails_the_load(client: RepositoryClient) -> None:
    status, message = error_of(client.load, "no_file")
    assert status == "400" and "cannot read input data file" in message
    client.unload("no_file")
