"""Triton's ``--backend-config`` settings for ONNX Runtime, in real servers: the ``max_batch_size``
auto-complete gives a model without one (``default-max-batch-size``), the process-wide thread pools
(``enable-global-threadpool``), the log lines Triton users grep for, and a bad value failing the
models that need the backend with Triton's words while the others serve."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from tests.backends.onnxruntime.models import tensor_info, write_model
from tests.backends.onnxruntime.test_shared_threads import IGNORED, THREADS
from tests.support.server import EXAMPLES, ServerProcess


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``doubler``: ``y = 2 x`` on FP32 ``[n, 4]`` with no config (it can batch, so auto-complete
    gives it a ``max_batch_size``); ``fixed``: the same with its config and a thread count of its own."""
    root = tmp_path_factory.mktemp("backend-config")
    graph = ([helper.make_node("Add", ["x", "x"], ["y"])], [tensor_info("x", TensorProto.FLOAT, ["n", 4])])
    write_model(root, "doubler", graph[0], graph[1], [tensor_info("y", TensorProto.FLOAT, ["n", 4])])
    shutil.copytree(root / "doubler", root / "fixed")
    (root / "fixed" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 2\n'
        'input { name: "x" data_type: TYPE_FP32 dims: [4] }\n'
        'output { name: "y" data_type: TYPE_FP32 dims: [4] }\n' + THREADS
    )
    return root


def served_config(server: ServerProcess, model: str = "doubler") -> dict[str, object]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        config: dict[str, object] = client.get_model_config(model)
        return config
    finally:
        client.close()


def doubled(server: ServerProcess, batch: int, model: str = "doubler") -> np.ndarray:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        x = np.arange(batch * 4, dtype=np.float32).reshape(batch, 4)
        given = httpclient.InferInput("x", list(x.shape), "FP32")
        given.set_data_from_numpy(x)
        answer = client.infer(model, [given]).as_numpy("y")
        np.testing.assert_array_equal(answer, 2 * x)
        return answer
    finally:
        client.close()


def configuration_line(log: str) -> dict[str, object]:
    """The JSON of the backend's ``backend configuration:`` line, as NVIDIA's L0_backend_config reads it."""
    [line] = [line for line in log.splitlines() if '"backend configuration:\\n' in line]
    quoted = line[line.index('] "') + 2 :]
    document: dict[str, object] = json.loads(json.loads(quoted).split("\n", 1)[1])
    return document


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--backend-config=onnxruntime,default-max-batch-size=5"], 5),
        # the last global one wins; a backend's own wins over every global one
        (["--backend-config=default-max-batch-size=7", "--backend-config=default-max-batch-size=8"], 8),
        (["--backend-config=onnxruntime,default-max-batch-size=0", "--backend-config=default-max-batch-size=6"], 0),
    ],
)
def test_default_max_batch_size_is_what_auto_complete_gives(
    repo: Path, args: list[str], expected: int
) -> None:
    load = ["--model-control-mode=explicit", "--load-model=doubler", "--log-verbose=1"]
    with ServerProcess([repo], [*load, *args]) as server:
        config = served_config(server)
        assert config["max_batch_size"] == expected
        if expected:
            assert config["dynamic_batching"]["preferred_batch_size"] == [expected]  # type: ignore[index]
            doubled(server, expected)
            with pytest.raises(InferenceServerException, match=f"batch-size must be <= {expected} for .doubler."):
                doubled(server, expected + 1)
        else:
            assert "dynamic_batching" not in config
            assert served_config(server)["input"][0]["dims"] == [-1, 4]  # type: ignore[index]
            doubled(server, 3)  # (the whole [n, 4] tensor, unbatched)
        server.stop()  # (the model unloads: its batcher stops)
        log = server.log()
    assert f'"Found overwritten default setting: default-max-batch-size,{expected}"' in log
    assert "Adding default backend config setting" not in log
    assert f"autofilled max_batch_size to {expected} for model 'doubler' since batching is supporrted" in log
    cmdline = configuration_line(log)["cmdline"]
    assert cmdline["default-max-batch-size"] == str(expected)  # type: ignore[index]
    assert ("Starting dynamic-batcher thread for doubler at nice 0..." in log) == bool(expected)
    assert ("Stopping dynamic-batcher thread for doubler..." in log) == bool(expected)


def test_without_settings_the_default_is_logged_and_used(repo: Path) -> None:
    args = ["--model-control-mode=explicit", "--load-model=doubler", "--log-verbose=1", "--backend-config=a=0"]
    with ServerProcess([repo], args) as server:
        assert served_config(server)["max_batch_size"] == 4
        log = server.log()
    assert '"Adding default backend config setting: default-max-batch-size,4"' in log
    cmdline = configuration_line(log)["cmdline"]
    assert list(cmdline) == [  # type: ignore[call-overload]
        "a",
        "auto-complete-config",
        "backend-directory",
        "min-compute-capability",
        "default-max-batch-size",
    ]
    assert cmdline["a"] == "0"  # type: ignore[index]


def test_global_threadpool_puts_every_session_on_the_process_pools(repo: Path) -> None:
    args = [
        "--model-control-mode=explicit",
        "--load-model=fixed",
        "--backend-config=onnxruntime,enable-global-threadpool=ON",
        "--backend-config=onnxruntime,intra_op_thread_count=1",
    ]
    with ServerProcess([repo], args) as server:
        doubled(server, 2, "fixed")
        log = server.log()
    # the model's own thread count cannot apply to pools shared by every session
    assert f"model 'fixed': {IGNORED}" in log
    with ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=fixed"]) as server:
        doubled(server, 2, "fixed")
        assert IGNORED not in server.log()


@pytest.mark.parametrize(
    ("setting", "reason"),
    [
        ("default-max-batch-size=four", "failed to convert 'four' to integral number"),
        ("enable-global-threadpool=maybe", "failed to convert 'maybe' to boolean"),
    ],
)
def test_a_bad_value_fails_the_models_that_need_the_backend(repo: Path, setting: str, reason: str) -> None:
    args = ["--model-control-mode=explicit", f"--backend-config=onnxruntime,{setting}"]
    with ServerProcess([repo, EXAMPLES], args) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            with pytest.raises(InferenceServerException, match=reason) as refused:
                client.load_model("doubler")
            assert refused.value.status() == "400"
            client.load_model("add_sub")  # another backend's models load and serve
            assert client.is_model_ready("add_sub")
            assert not client.is_model_ready("doubler")
        finally:
            client.close()
