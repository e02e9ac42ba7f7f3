"""Bearer keys (``--auth-key-file``): no token is 401 / UNAUTHENTICATED, a key without the call's
scope is 403 / PERMISSION_DENIED, health stays open, the file is reloaded when it changes, and no
token ever reaches the log."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.extensions.clients import Client, client_for, refused, status_of
from tests.extensions.conftest import KEYS, key_file_text
from tests.support.server import ServerProcess


def _auth(protocol: str, name: str | None) -> dict[str, str] | None:
    if name is None:
        return None
    return {"authorization" if protocol == "grpc" else "Authorization": f"Bearer {KEYS[name][0]}"}


def _unauthenticated(protocol: str, message: str) -> Any:
    return refused(status_of(protocol, 401, "UNAUTHENTICATED"), message)


def _forbidden(protocol: str, key: str, scope: str) -> Any:
    return refused(status_of(protocol, 403, "PERMISSION_DENIED"), f"key '{key}' lacks the '{scope}' scope")


def _infer(client: Client, headers: dict[str, str] | None) -> Any:
    inputs = [client.input("INPUT0", [4], "FP32"), client.input("INPUT1", [4], "FP32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones(4, np.float32))
    return client.client.infer("add_sub", inputs, headers=headers)


@pytest.fixture
def client(protocol: str, auth_server: ServerProcess) -> Any:
    with client_for(protocol, auth_server) as connected:
        yield connected


def _calls(client: Client) -> dict[str, tuple[str, Callable[[dict[str, str] | None], Any]]]:
    """Calls by what they need: name -> (scope, call with headers)."""
    c = client.client
    return {
        "infer": ("infer", lambda h: _infer(client, h)),
        "server metadata": ("read", lambda h: c.get_server_metadata(headers=h)),
        "model metadata": ("read", lambda h: c.get_model_metadata("add_sub", headers=h)),
        "config": ("read", lambda h: c.get_model_config("add_sub", headers=h)),
        "statistics": ("read", lambda h: c.get_inference_statistics("add_sub", headers=h)),
        "index": ("read", lambda h: c.get_model_repository_index(headers=h)),
        "shm status": ("read", lambda h: c.get_system_shared_memory_status(headers=h)),
        "shm unregister": ("admin", lambda h: c.unregister_system_shared_memory(headers=h)),
    }


def test_health_needs_no_token(client: Client) -> None:
    assert client.client.is_server_live()
    assert client.client.is_server_ready()
    assert client.client.is_model_ready("add_sub")


def test_no_token_or_a_wrong_one_is_unauthenticated(client: Client) -> None:
    wrong = {"authorization": "Bearer not-a-key-at-all-000000"}
    for _scope, call in _calls(client).values():
        with _unauthenticated(client.protocol, "missing bearer token"):
            call(None)
        with _unauthenticated(client.protocol, "invalid bearer token"):
            call(wrong)
    with _unauthenticated(client.protocol, "missing bearer token"):
        call({"authorization": KEYS["ops"][0]})  # a token, but not as a bearer one


@pytest.mark.parametrize("key", ["runner", "viewer", "ops"])
def test_each_key_can_do_exactly_its_scopes(client: Client, key: str) -> None:
    granted = KEYS[key][1]
    for scope, call in _calls(client).values():
        if granted == "admin" or scope == granted:
            call(_auth(client.protocol, key))
        else:
            with _forbidden(client.protocol, key, scope):
                call(_auth(client.protocol, key))


def test_key_file_changes_apply_without_restart(
    protocol: str, auth_server: ServerProcess, key_file: Path
) -> None:
    late = ("late-token-0123456789abc", "infer")
    keys = {name: value for name, value in KEYS.items() if name != "doomed"} | {"late": late}
    original = key_file.read_text()
    try:
        with client_for(protocol, auth_server) as client:
            _infer(client, _auth(protocol, "doomed"))
            # in one step (a rename), as the kubelet does: the watcher never reads a half-written file
            _replace(key_file, key_file_text(keys))
            time.sleep(1.1)  # the file is looked at no more than once a second
            with _unauthenticated(protocol, "invalid bearer token"):
                _infer(client, _auth(protocol, "doomed"))
            _infer(client, {"authorization": f"Bearer {late[0]}"})
            for _ in range(4):  # new connections: with frontend workers, each worker reads the file itself
                with client_for(protocol, auth_server) as other:
                    with _unauthenticated(protocol, "invalid bearer token"):
                        _infer(other, _auth(protocol, "doomed"))
                    _infer(other, {"authorization": f"Bearer {late[0]}"})
            _replace(key_file, "this line is not a key\n")  # a broken file keeps the last good keys
            time.sleep(1.1)
            _infer(client, {"authorization": f"Bearer {late[0]}"})
    finally:
        _replace(key_file, original)
        time.sleep(1.1)


def _replace(path: Path, text: str) -> None:
    """Write ``path`` anew in one step (a rename over it)."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(text)
    os.replace(fresh, path)


def _logged(server: ServerProcess, fragment: str, count: int) -> None:
    """Wait until the server's log holds ``fragment`` ``count`` times."""
    deadline = time.monotonic() + 20
    while server.log().count(fragment) < count:
        assert time.monotonic() < deadline, f"{fragment!r} logged fewer than {count} times"
        time.sleep(0.05)


def test_tokens_never_reach_the_log(auth_server: ServerProcess) -> None:
    log = auth_server.log()
    for token, _scopes in KEYS.values():
        assert token not in log


def test_a_good_file_counts_even_if_no_call_came_before_it_broke(
    auth_server: ServerProcess, key_file: Path, frontend_workers: int
) -> None:
    """The keys of the last good file apply, whether or not a call came while it was there: else a
    process (a frontend worker no connection reached) could keep a key that file revoked.  One protocol
    is enough: both check calls against the same keys."""
    protocol = "http"
    late = ("late-token-0123456789abc", "infer")
    keys = {name: value for name, value in KEYS.items() if name != "doomed"} | {"late": late}
    watchers = max(frontend_workers, 1)  # each process that checks calls watches the file itself
    original = key_file.read_text()
    try:
        # No call: the file is looked at once a second all the same.  Each watcher logs what it took:
        # the test waits for that (a fixed wait of 1.5 s failed once on a loaded machine).  The
        # files are replaced whole, as Kubernetes updates a mounted Secret, so no watcher can read one
        # half written.
        taken, kept = " late)", "not reloaded, the previous keys stay"  # (the log lines of each)
        log = auth_server.log()
        before = log.count(taken), log.count(kept)
        _replace(key_file, key_file_text(keys))
        _logged(auth_server, taken, before[0] + watchers)
        _replace(key_file, "this line is not a key\n")
        _logged(auth_server, kept, before[1] + watchers)
        for _ in range(4):  # new connections: with frontend workers, each worker reads the file itself
            with client_for(protocol, auth_server) as client:
                with _unauthenticated(protocol, "invalid bearer token"):
                    _infer(client, _auth(protocol, "doomed"))
                _infer(client, {"authorization": f"Bearer {late[0]}"})
    finally:
        _replace(key_file, original)
        time.sleep(1.1)
