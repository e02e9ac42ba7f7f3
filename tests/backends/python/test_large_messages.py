"""BYTES tensors travel in the model process's messages: one larger than the socket holds (about
200 KiB) is written whole though the engine's end of the socket is non-blocking (the event loop
watches it), while the model process writes results back, and many at once; before, the engine
wrote the first part and the request hung (NVIDIA's qa L0_http size tests send 64 MiB strings).
Such a frame to a model process busy with an earlier execution is written as the process reads,
while the event loop serves every other model (before, the loop waited for the process)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from tests.support.models import identity_config, write_identity, write_model
from tests.support.server import ServerProcess

#: An identity that holds its first execution until the test creates ``release`` beside its config.
HELD_PY = """
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.release = os.path.join(args["model_repository"], "release")

    def execute(self, requests):
        open(self.release + "-started", "w").close()
        while not os.path.exists(self.release):
            time.sleep(0.01)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""


def _echo(server: ServerProcess, text: bytes, model: str = "strings") -> bytes:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60, connection_timeout=60)
    try:
        tensor = httpclient.InferInput("INPUT0", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([text], dtype=np.object_))
        output = client.infer(model, [tensor]).as_numpy("OUTPUT0")
        assert output is not None
        return bytes(output[0])
    finally:
        client.close()


def test_strings_larger_than_a_socket_holds_cross_to_the_model_process_and_back(tmp_path: Path) -> None:
    write_identity(tmp_path / "repo", "strings", "TYPE_STRING")
    with ServerProcess([tmp_path / "repo"]) as server:
        for size in (300_000, 4_000_000):
            text = bytes(range(256)) * (size // 256)
            assert _echo(server, text) == text
        texts = [bytes([65 + i]) * 500_000 for i in range(8)]
        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(lambda text: _echo(server, text), texts)) == texts


def test_a_large_execution_for_a_busy_model_process_leaves_other_models_served(tmp_path: Path) -> None:
    held = write_model(tmp_path / "repo", "held", identity_config("held", "TYPE_STRING"), HELD_PY)
    write_identity(tmp_path / "repo", "strings", "TYPE_STRING")
    with ServerProcess([tmp_path / "repo"]) as server, ThreadPoolExecutor(2) as pool:
        first = pool.submit(_echo, server, b"first", "held")
        # the first execution holds the model process: the second's 4 MB cannot all be written now
        deadline = time.monotonic() + 30
        while not (held / "release-started").exists():
            assert time.monotonic() < deadline, "the first execution did not start"
            time.sleep(0.01)
        second_text = b"s" * 4_000_000
        second = pool.submit(_echo, server, second_text, "held")
        time.sleep(0.5)  # (for the second to reach the engine: no outcome depends on how long)
        assert _echo(server, b"another model") == b"another model"  # hung here before
        assert not first.done() and not second.done()
        (held / "release").touch()
        assert first.result(timeout=60) == b"first"
        assert second.result(timeout=60) == second_text
