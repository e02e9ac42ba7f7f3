"""EXPLICIT mode through the repository API: index entries, load, unload, errors and readiness as in
Triton 2.51 (each expectation below was checked against the real server)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.repository.clients import RepositoryClient, error_of, eventually, rows
from tests.repository.conftest import PROTOCOLS, ServerFactory, connect
from tests.repository.models import set_mark, write_marked
from tests.support import modes
from tests.support.models import write_model
from tests.support.server import ServerProcess

# Model control answers the same in both server modes.
frontend_workers = modes.frontend_workers

BROKEN_CONFIG = """
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, protocol: str) -> Path:
    repo = tmp_path_factory.mktemp("explicit-repo")
    write_marked(repo, "alpha", "a")
    write_marked(repo, "beta", "b", versions=(1, 2, 3))
    write_marked(repo, "gamma", "g")
    write_model(repo, "broken", BROKEN_CONFIG, 'raise RuntimeError("boom")\n')
    write_model(repo, "no_versions", BROKEN_CONFIG)
    (repo / "no_versions" / "1").rmdir()
    write_model(repo, "bad_config", "backend: 'python' input [ { name: 'X' \n", "")
    return repo


@pytest.fixture(scope="module")
def server(repo: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    args = ["--model-control-mode=explicit", "--load-model=alpha"]
    with ServerProcess([repo], args, frontend_workers=frontend_workers) as process:
        yield process


@pytest.fixture
def client(protocol: str, server: ServerProcess) -> Iterator[RepositoryClient]:
    client = connect(protocol, server)
    yield client
    client.close()


def test_startup_loads_only_the_named_models(client: RepositoryClient) -> None:
    index = client.index()
    assert rows(index, "alpha") == [{"version": "1", "state": "READY"}]
    assert rows(index, "gamma") == [{}]  # never loaded: listed by name only
    assert client.server_ready()  # models never loaded do not count against readiness


def test_load_infer_unload_cycle(client: RepositoryClient) -> None:
    client.load("gamma")
    assert rows(client.index(), "gamma") == [{"version": "1", "state": "READY"}]
    assert client.mark("gamma") == "g:1"
    client.unload("gamma")
    assert rows(client.index(), "gamma") == [{"version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}]
    assert not client.is_ready("gamma")
    assert client.server_ready()  # unloaded on purpose: still ready
    assert error_of(client.mark, "gamma")[1] == "Request for unknown model: 'gamma' has no available versions"
    client.unload("gamma")  # unloading twice succeeds
    client.unload("never_heard_of")  # so does unloading an unknown model


def test_index_ready_filter_lists_only_ready_versions(client: RepositoryClient) -> None:
    ready = client.index(ready=True)
    assert ready and all(entry["state"] == "READY" for entry in ready)
    assert "gamma" not in {entry["name"] for entry in ready}


def test_unknown_model_is_a_poll_failure(client: RepositoryClient) -> None:
    assert error_of(client.load, "nope") == (
        "500",
        "failed to load 'nope', failed to poll from model repository",
    )
    assert "nope" not in {entry["name"] for entry in client.index()}


@pytest.mark.parametrize("name", ["../etc", "a/../b", "..", "/etc/passwd", "model/", " .. ", "../alpha"])
def test_a_name_reaching_outside_the_repository_is_refused_as_current_triton_refuses_it(
    client: RepositoryClient, protocol: str, name: str
) -> None:
    """Current Triton's words (qa's L0_input_validation, over gRPC); 2.51 answered "failed to poll"
    (500).  Over HTTP a name holding a ``/`` is a path of its own that never reaches the load route
    (404, as from Triton)."""
    if protocol == "http" and "/" in name:
        assert error_of(client.load, name)[0] == "404"
        return
    assert error_of(client.load, name) == (
        "400",
        f"invalid model name '{name}', model name must not contain path traversal characters",
    )
    client.unload(name)  # an unload is not checked: there is nothing of that name to unload


@pytest.mark.parametrize("name", ["alpha\x00", "alpha\x00x", "\x00"])
def test_a_name_holding_a_nul_is_refused_and_the_model_it_starts_with_keeps_its_instance(
    client: RepositoryClient, name: str
) -> None:
    """A NUL is the mark between a model's name and its repository in the server's keys: a load of
    ``alpha\\x00`` loaded ``alpha`` again under a key nothing unloads, a model process leaked each
    time (found by ``make fuzz``).  Refused now, before anything is loaded: ``alpha`` answers from the
    same instance (its execution count goes on), and an unload of such a name touches nothing."""
    mark, before = client.infer("alpha")
    assert error_of(client.load, name) == ("400", f"invalid model name '{name}'")
    client.unload(name)
    assert client.infer("alpha") == (mark, before + 1)
    assert rows(client.index(), "alpha") == [{"version": "1", "state": "READY"}]


@pytest.mark.parametrize("name", ["", " ", "\t \n"])
def test_an_empty_name_is_refused(client: RepositoryClient, protocol: str, name: str) -> None:
    if protocol == "http" and not name:  # ``/v2/repository/models//load``: no such route (404, as Triton's)
        assert error_of(client.load, name)[0] == "404"
        return
    assert error_of(client.load, name) == (
        "400",
        "Model name cannot be empty. Please enter a valid name to deploy.",
    )


@pytest.mark.parametrize("name", ["...", "..alpha", "model..1"])
def test_a_name_with_dots_inside_one_segment_is_looked_for(client: RepositoryClient, name: str) -> None:
    assert error_of(client.load, name) == (
        "500",
        f"failed to load '{name}', failed to poll from model repository",
    )


def test_unparsable_config_is_a_poll_failure(client: RepositoryClient) -> None:
    status, message = error_of(client.load, "bad_config")
    assert (status, message) == ("500", "failed to load 'bad_config', failed to poll from model repository")
    client.unload("bad_config")


def test_failing_model_reports_each_version_and_holds_readiness_until_unloaded(
    client: RepositoryClient,
) -> None:
    status, message = error_of(client.load, "broken")
    assert status == "400"
    assert message.startswith("load failed for model 'broken': version 1 is at UNAVAILABLE state: ")
    assert "RuntimeError: boom" in message and message.endswith(";\n")
    (entry,) = rows(client.index(), "broken")
    assert entry["version"] == "1" and entry["state"] == "UNAVAILABLE" and "boom" in entry["reason"]
    assert not client.server_ready()
    client.unload("broken")
    assert rows(client.index(), "broken") == [{"version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}]
    assert client.server_ready()


def test_no_versions_is_a_load_failure(client: RepositoryClient) -> None:
    status, message = error_of(client.load, "no_versions")
    assert (status, message) == (
        "400",
        "load failed for model 'no_versions': at least one version must be available under the version "
        "policy of model 'no_versions'\n",
    )
    client.unload("no_versions")


def test_version_policy_and_dropped_versions(client: RepositoryClient) -> None:
    config = {
        "backend": "python",
        "version_policy": {"all": {}},
        "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [1]}],
        "output": [
            {"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [1]},
            {"name": "MARK", "data_type": "TYPE_STRING", "dims": [1]},
        ],
    }
    client.load("beta", config=json.dumps(config))
    assert [e["state"] for e in rows(client.index(), "beta")] == ["READY", "READY", "READY"]
    assert client.mark("beta") == "b:3" and client.mark("beta", "1") == "b:1"
    client.load("beta")  # back to config.pbtxt: latest 1
    assert rows(client.index(), "beta") == [
        {"version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
        {"version": "2", "state": "UNAVAILABLE", "reason": "unloaded"},
        {"version": "3", "state": "READY"},
    ]
    assert error_of(client.mark, "beta", "1") == (
        "503",
        "Request for unknown model: 'beta' version 1 is not at ready state",
    )
    client.unload("beta")


def test_load_and_unload_rejected_outside_explicit_mode(
    tmp_path: Path, serve: ServerFactory, frontend_workers: int
) -> None:
    write_marked(tmp_path, "alpha")
    for mode in ("none", "poll"):
        with serve(tmp_path, f"--model-control-mode={mode}", frontend_workers=frontend_workers) as server:
            for protocol in PROTOCOLS:  # read-only requests: one server answers both protocols
                client = connect(protocol, server)
                expected = ("503", "explicit model load / unload is not allowed if polling is enabled")
                assert error_of(client.load, "alpha") == expected
                assert error_of(client.unload, "alpha") == expected
                assert client.mark("alpha") == "a:1"
                client.close()


# The two startup flags below are the engine's alone (the workers only relay the index the tests read,
# which the shared server's tests cover in both modes): one process, both protocols on one server.


def test_load_model_star_loads_everything(tmp_path: Path, serve: ServerFactory) -> None:
    write_marked(tmp_path, "one")
    write_marked(tmp_path, "two")
    with serve(tmp_path, "--model-control-mode=explicit", "--load-model=*") as server:
        for protocol in PROTOCOLS:
            client = connect(protocol, server)
            assert {e["name"] for e in client.index(ready=True)} == {"one", "two"}
            client.close()


def test_load_model_naming_a_missing_model_keeps_the_server_unready(
    tmp_path: Path, serve: ServerFactory
) -> None:
    write_marked(tmp_path, "one")
    args = ("--model-control-mode=explicit", "--load-model=one", "--load-model=missing", "--exit-on-error=false")
    with serve(tmp_path, *args, wait_ready=False) as server:
        for protocol in PROTOCOLS:
            client = connect(protocol, server)
            (entry,) = eventually(lambda: rows(client.index(), "missing"))  # noqa: B023 (called at once)
            assert entry["state"] == "UNAVAILABLE" and "not found" in entry["reason"]
            assert eventually(lambda: client.mark("one") == "a:1")  # noqa: B023
            assert not client.server_ready()
            client.close()


def test_reload_of_an_unchanged_model_keeps_its_instances(client: RepositoryClient, repo: Path) -> None:
    client.load("gamma")
    assert client.infer("gamma") == ("g:1", 1)
    client.load("gamma")
    # the same instance answers: its execution count goes on instead of restarting
    assert client.infer("gamma") == ("g:1", 2)
    set_mark(repo / "gamma", 1, "g2")
    client.load("gamma")
    assert client.mark("gamma") == "g2:1"
    set_mark(repo / "gamma", 1, "g")
    client.unload("gamma")
