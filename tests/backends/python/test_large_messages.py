"""BYTES tensors travel in the model process's messages: one larger than the socket holds (about
200 KiB) is written whole though the engine's end of the socket is non-blocking (the event loop
watches it), while the model process writes results back, and many at once; before, the engine
wrote the first part and the request hung (NVIDIA's qa L0_http size tests send 64 MiB strings)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from tests.support.models import write_identity
from tests.support.server import ServerProcess


def _echo(server: ServerProcess, text: bytes) -> bytes:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60, connection_timeout=60)
    try:
        tensor = httpclient.InferInput("INPUT0", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([text], dtype=np.object_))
        output = client.infer("strings", [tensor]).as_numpy("OUTPUT0")
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
