"""POLL mode: models and versions added, changed and removed on disk are applied at the poll that sees
them once they have settled, and a change still being written only once it is the same in two polls."""

from __future__ import annotations

import importlib.util
import py_compile
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from naiad.repository.sync.engine import sync

from tests.repository.clients import RepositoryClient, error_of, eventually, rows
from tests.repository.conftest import ServerFactory, connect
from tests.repository.models import marked_config, set_mark, write_marked
from tests.support.modes import WORKERS
from tests.support.server import ServerProcess

POLL_SECS = 1


@pytest.fixture(scope="module")
def protocol() -> str:
    """What is tested here does not depend on the protocol (the API is covered over both elsewhere)."""
    return "http"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, protocol: str) -> Path:
    repo = tmp_path_factory.mktemp("poll-repo")
    write_marked(repo, "base", "base")
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    args = ["--model-control-mode=poll", f"--repository-poll-secs={POLL_SECS}"]
    with ServerProcess([repo], args) as process:
        yield process


@pytest.fixture
def client(protocol: str, server: ServerProcess) -> Iterator[RepositoryClient]:
    client = connect(protocol, server)
    yield client
    client.close()


def _staged(repo: Path, name: str) -> Path:
    """Build a model next to the repository and move it in with one rename (a complete arrival)."""
    staging = repo.parent / f"{repo.name}-staging"
    staging.mkdir(exist_ok=True)
    write_marked(staging, name, name)
    target = repo / name
    (staging / name).rename(target)
    return target


def test_models_and_versions_are_followed(client: RepositoryClient, repo: Path) -> None:
    assert client.mark("base") == "base:1"
    model_dir = _staged(repo, "added")
    assert eventually(lambda: client.mark("added") == "added:1")

    set_mark(model_dir, 2, "second")
    eventually(lambda: client.mark("added") == "second:2")
    # version 2 serves as soon as it is READY; version 1 is UNLOADING until its unload finishes
    replaced = [
        {"version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
        {"version": "2", "state": "READY"},
    ]
    eventually(lambda: rows(client.index(), "added") == replaced)

    set_mark(model_dir, 2, "edited")
    eventually(lambda: client.mark("added") == "edited:2")

    config = marked_config("added", extra="version_policy: { all: {} }")
    (model_dir / "config.pbtxt").write_text(config)
    eventually(lambda: client.mark("added", "1") == "added:1")
    assert client.mark("added") == "edited:2"

    shutil.rmtree(model_dir)
    eventually(lambda: "added" not in {e["name"] for e in client.index()})
    assert client.mark("base") == "base:1"


@pytest.mark.parametrize("frontend_workers", [0, WORKERS], ids=["in-process", "workers"])
def test_a_removed_model_is_kept_with_no_version_available(tmp_path: Path, frontend_workers: int) -> None:
    """As Triton 2.51 answers, side by side: a model whose folder left the repository is no longer in
    the index, and a request for it is told it has no available versions (a version: not at ready
    state, 503), not that it is not found; put back, it serves again."""
    repo = tmp_path / "repo"
    write_marked(repo, "gone", "g")
    write_marked(repo, "stays", "s")
    args = ["--model-control-mode=poll", f"--repository-poll-secs={POLL_SECS}"]
    with ServerProcess([repo], args, frontend_workers=frontend_workers) as server:
        clients = [connect("http", server), connect("grpc", server)]
        assert clients[0].mark("gone") == "g:1"
        shutil.move(repo / "gone", tmp_path / "parked")
        eventually(lambda: [e["name"] for e in clients[0].index()] == ["stays"])
        for client in clients:
            assert error_of(client.mark, "gone") == (
                "404",
                "Request for unknown model: 'gone' has no available versions",
            )
            assert error_of(client.mark, "gone", "1") == (
                "503",
                "Request for unknown model: 'gone' version 1 is not at ready state",
            )
            assert not client.is_ready("gone")
            assert client.mark("stays") == "s:1"
        assert [e["name"] for e in clients[1].index()] == ["stays"]
        assert clients[0].server_ready()  # (a removed model holds no readiness down)
        shutil.move(tmp_path / "parked", repo / "gone")
        eventually(lambda: clients[1].mark("gone") == "g:1")
        assert sorted(e["name"] for e in clients[0].index()) == ["gone", "stays"]
        for client in clients:
            client.close()


def test_a_failed_change_keeps_the_old_model_serving(
    client: RepositoryClient, repo: Path, server: ServerProcess
) -> None:
    set_mark(repo / "base", 1, "broken", fail="bad edit")
    eventually(lambda: "bad edit" in server.log())
    assert client.mark("base") == "base:1"
    assert rows(client.index(), "base") == [{"version": "1", "state": "READY"}]
    set_mark(repo / "base", 1, "fixed")
    eventually(lambda: client.mark("base") == "fixed:1")


def test_a_model_still_being_written_is_not_loaded(client: RepositoryClient, repo: Path) -> None:
    model_dir = repo / "growing"
    write_marked(repo, "growing", "grown")
    log = model_dir / "1" / "notes.txt"
    deadline = time.monotonic() + 3.5 * POLL_SECS
    while time.monotonic() < deadline:  # the upload goes on: the folder differs at every poll
        with log.open("a") as file:
            file.write("more\n")
        assert rows(client.index(), "growing") in ([], [{}]), "loaded while still being written"
        time.sleep(0.2)
    eventually(lambda: client.mark("growing") == "grown:1")


def test_a_synced_repository_switch_reloads_only_what_changed(
    tmp_path: Path, serve: ServerFactory, protocol: str
) -> None:
    source = tmp_path / "source"
    write_marked(source, "same", "s")
    write_marked(source, "edited", "e")
    dest = tmp_path / "dest"
    sync(str(source), dest)
    args = ("--model-control-mode=poll", f"--repository-poll-secs={POLL_SECS}")
    with serve(dest / "current", *args) as server:
        client = connect(protocol, server)
        assert client.infer("same") == ("s:1", 1)
        set_mark(source / "edited", 1, "e2")
        sync(str(source), dest)  # a new snapshot; `current` switches in one rename
        eventually(lambda: client.mark("edited") == "e2:1")
        assert client.infer("same") == ("s:1", 2)  # untouched: the same instance still serves
        client.close()


def test_bytecode_beside_a_model_is_no_change(tmp_path: Path, protocol: str) -> None:
    """A ``__pycache__`` beside ``model.py`` (the user's tools, another server: ours compiles models'
    sources without writing one, even where Python may write bytecode) changes nothing about the
    model, so POLL does not reload it."""
    repo = tmp_path / "repo"
    write_marked(repo, "compiled", "c")
    args = ["--model-control-mode=poll", f"--repository-poll-secs={POLL_SECS}"]
    with ServerProcess([repo], args, env={"PYTHONDONTWRITEBYTECODE": ""}) as server:
        client = connect(protocol, server)
        assert client.infer("compiled") == ("c:1", 1)
        source = repo / "compiled" / "1" / "model.py"
        assert not (source.parent / "__pycache__").exists()
        py_compile.compile(str(source), cfile=importlib.util.cache_from_source(str(source)), doraise=True)
        time.sleep(3.5 * POLL_SECS)  # three polls after the bytecode appeared
        assert client.infer("compiled") == ("c:1", 2)  # the same instance: not reloaded
        client.close()


def test_a_settled_change_is_applied_at_the_scan_that_sees_it(tmp_path: Path, protocol: str) -> None:
    """Triton applies a change at the scan that sees it; so does Naiad once nothing in the model's folder
    has changed for a while (a change still being written waits a scan more, above).  The repository
    is a link switched to a folder written seconds before (as a deployment tool switches releases), so
    the new model is settled when the first scan sees it: loaded then, with no scan spent waiting."""
    releases = tmp_path / "releases"
    write_marked(releases / "one", "kept", "k")
    repo = tmp_path / "repo"
    repo.symlink_to(releases / "one")
    args = ["--model-control-mode=poll", "--repository-poll-secs=3", "--log-verbose=1"]
    with ServerProcess([repo], args) as server:
        client = connect(protocol, server)
        assert client.mark("kept") == "k:1"
        shutil.copytree(releases / "one", releases / "two")
        write_marked(releases / "two", "arrived", "new")
        time.sleep(2.5)  # longer than the settling time: nothing in it changes from here on
        switch = tmp_path / "repo.next"
        switch.symlink_to(releases / "two")
        switch.rename(repo)  # one rename: the scans see one release or the other
        assert eventually(lambda: client.mark("arrived") == "new:1", timeout=15)
        assert "model 'arrived' changed in the repository: loading" in server.log()
        assert "'arrived' is changing in the repository" not in server.log()  # no scan waited
        client.close()
