"""ONNX Runtime sessions on the process-wide thread pools, in servers whose models come and go.

A server with on-demand loading or a memory budget shares ORT's process-wide pools between its
sessions (a session with pools of its own blocks the event loop while it is destroyed; see
``naiad.backends.onnxruntime.session``); other servers keep Triton's pools per session.  Real servers,
real tritonclient, the ``simple`` example (INPUT0 + INPUT1, INPUT0 - INPUT1).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.server import ServerProcess

IGNORED = "intra_op_thread_count / inter_op_thread_count ignored"
THREADS = 'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'


@pytest.fixture(scope="module")
def repo(examples: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``a`` and ``b``: copies of ``simple``; ``tuned``: one whose config sets its own thread count."""
    root = tmp_path_factory.mktemp("shared-threads")
    for name, extra in (("a", ""), ("b", ""), ("tuned", THREADS)):
        shutil.copytree(examples / "simple", root / name)
        config = root / name / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "simple"', f'name: "{name}"') + extra)
    return root


def infer(server: ServerProcess, model: str, offset: int) -> tuple[np.ndarray, np.ndarray]:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    try:
        x = np.arange(offset, offset + 16, dtype=np.int32).reshape(1, 16)
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(np.ones_like(x))
        result = client.infer(model, inputs)
        return result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    finally:
        client.close()


def check(server: ServerProcess, model: str, offset: int) -> None:
    x = np.arange(offset, offset + 16, dtype=np.int32).reshape(1, 16)
    total, difference = infer(server, model, offset)
    np.testing.assert_array_equal(total, x + 1)
    np.testing.assert_array_equal(difference, x - 1)


def test_sessions_share_the_pools_across_loads_and_unloads_where_models_come_and_go(repo: Path) -> None:
    # three startup loads side by side on the load threads: the pools are made once all the same
    loads = [f"--load-model={name}" for name in ("a", "b", "tuned")]
    args = ["--model-control-mode=explicit", *loads, "--load-on-demand=*", "--model-memory-budget=2Gi"]
    with ServerProcess([repo], args) as server:
        for offset, model in enumerate(("a", "b", "tuned")):
            check(server, model, 10 * offset)
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            client.unload_model("a")  # its session goes; the others' run on the same pools
            check(server, "b", 100)
            check(server, "a", 200)  # loaded again, on demand
            client.unload_model("b")
            check(server, "tuned", 300)
        finally:
            client.close()
        log = server.log()
    assert f"model 'tuned': {IGNORED}" in log
    # a and b set no thread count (each model runs two CPU instances, Triton's default for ONNX Runtime)
    assert log.count(IGNORED) == log.count(f"model 'tuned': {IGNORED}") == 2


def test_other_servers_keep_the_thread_counts_a_config_sets(repo: Path) -> None:
    with ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=tuned", "--load-model=a"]) as server:
        check(server, "tuned", 0)
        check(server, "a", 50)
        log = server.log()
    assert IGNORED not in log
