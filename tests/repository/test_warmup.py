"""``model_warmup``: samples run on every instance before READY; a failing sample leaves the version
UNAVAILABLE with the reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


def _warmup(value: str, batch_size: int = 1, dims: str = "1") -> str:
    return (
        f'model_warmup [ {{ name: "w" batch_size: {batch_size} inputs {{ key: "INPUT0" value: '
        f"{{ data_type: TYPE_INT32 dims: [ {dims} ] {value} }} }} }} ]"
    )


#: (model, warmup) pairs Triton 2.51 refuses, with the reason its repository index gave (and the last
#: part of its load error): checked side by side with shared/reference/triton.sh.
REFUSED = {
    "variable": (
        _warmup("zero_data: true", dims="-1"),
        "Invalid argument: warmup setting expects all variable-size dimensions are specified for input 'INPUT0'",
    ),
    "short_file": (
        _warmup('input_data_file: "input0"'),
        "Invalid argument: [request id: <id_unknown>] warmup setting expects 4 bytes, but the data provided "
        "from input0only has 2 bytes",
    ),
    "no_type": (
        _warmup(""),
        "Invalid argument: [request id: <id_unknown>] warmup setting expects input 'INPUT0' to have "
        "input_data_type set",
    ),
    "pair": (  # max_batch_size 0: two requests of one sample are one execution of batch 2
        _warmup("zero_data: true", batch_size=2),
        "Invalid argument: failed to run warmup sample 'w': "
        + "batch size 2 for 'pair_0_0', max allowed is 0; " * 2,  # instance 0 of group pair_0
    ),
}


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
    for name, (warmup, _) in REFUSED.items():
        model_dir = write_marked(repo, name, "r", config_extra=warmup)
        (model_dir / "warmup").mkdir()
        (model_dir / "warmup" / "input0").write_bytes(b"\x01\x02")
    write_marked(repo, "zero_batch", "z", config_extra=_warmup("zero_data: true", batch_size=0, dims="-1"))
    with ServerProcess([repo], ["--model-control-mode=explicit", "--log-verbose=1"]) as process:
        yield process


@pytest.fixture
def client(protocol: str, server: ServerProcess) -> Iterator[RepositoryClient]:
    client = connect(protocol, server)
    yield client
    client.close()


def test_warmup_runs_every_sample_count_times_before_ready(client: RepositoryClient, server: ServerProcess) -> None:
    client.load("warm")
    # 3 executions of "zeros" and 1 of "random" happened before the first request
    assert client.infer("warm", batched=True) == ("w:1", 5)
    for sample, iterations in (("zeros", 3), ("random", 1)):  # logged as Triton logs them
        for iteration in range(1, iterations + 1):
            line = f"model 'warm' instance warm_0_0 is running warmup sample '{sample}' for iteration {iteration}"
            assert server.logged(line)


def test_warmup_from_a_data_file(client: RepositoryClient) -> None:
    client.load("good_file")
    assert client.infer("good_file") == ("f:1", 2)


def test_failing_warmup_leaves_the_version_unavailable_with_the_reason(client: RepositoryClient) -> None:
    status, message = error_of(client.load, "bad_file")
    assert status == "400"
    assert (
        "version 1 is at UNAVAILABLE state: Invalid argument: failed to run warmup sample 'from_file': "
        "negative input" in message
    )
    (entry,) = rows(client.index(), "bad_file")
    assert entry["state"] == "UNAVAILABLE" and "failed to run warmup sample 'from_file'" in entry["reason"]
    assert not client.server_ready()
    client.unload("bad_file")


def test_missing_warmup_file_fails_the_load(client: RepositoryClient, server: ServerProcess) -> None:
    """Triton 2.51's reason: ``Internal: failed to open text file for read <model>/warmup/absent: No
    such file or directory``."""
    status, message = error_of(client.load, "no_file")
    path = Path(server.repositories[0]) / "no_file" / "warmup" / "absent"
    reason = f"Internal: failed to open text file for read {path}: No such file or directory"
    assert status == "400" and message.rstrip().endswith(f"version 1 is at UNAVAILABLE state: {reason};")
    (entry,) = rows(client.index(), "no_file")
    assert entry["reason"] == reason
    client.unload("no_file")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_warmups_give_tritons_reasons(client: RepositoryClient, name: str) -> None:
    """Triton 2.51 on the same settings: the load fails (400) and the index shows exactly this reason."""
    reason = REFUSED[name][1]
    status, message = error_of(client.load, name)
    assert status == "400" and message.rstrip().endswith(f"version 1 is at UNAVAILABLE state: {reason};"), message
    (entry,) = rows(client.index(), name)
    assert entry == {"version": "1", "state": "UNAVAILABLE", "reason": reason}
    client.unload(name)


def test_a_batch_size_zero_sample_is_skipped(client: RepositoryClient) -> None:
    """Triton 2.51 skips a ``batch_size: 0`` sample (its variable dims are never looked at): READY."""
    client.load("zero_batch")
    assert client.infer("zero_batch") == ("z:1", 1)
    client.unload("zero_batch")
