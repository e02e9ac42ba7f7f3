"""Peer forwarding (``--peers-file``): a server asked for a model it does not serve, which a peer holds,
answers with the peer's answer (docs/placement.md; issue #25).

Two real servers: B serves ``simple``; A serves nothing and its peers file names B for ``simple``, A
itself for ``ghost`` (a loop, cut by the ``naiad-forwarded`` header) and a closed port for ``gone``.
A runs in both server modes (one process; frontend workers), clients are tritonclient HTTP and gRPC.
"""

from __future__ import annotations

import json
import queue
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import modes
from tests.support.server import EXAMPLES, ServerProcess, free_port

frontend_workers = modes.frontend_workers


class Pair:
    def __init__(self, a: ServerProcess, b: ServerProcess, peers_file: Path) -> None:
        self.a, self.b, self.peers_file = a, b, peers_file

    def write_peers(self, models: dict[str, list[str]]) -> None:
        """Replace the peers file as the kubelet replaces a ConfigMap's file: a new file renamed over."""
        scratch = self.peers_file.with_suffix(".new")
        scratch.write_text(json.dumps({"models": models}))
        scratch.replace(self.peers_file)

    def default_peers(self) -> dict[str, list[str]]:
        b, a = self.b, self.a
        return {
            "simple": [f"127.0.0.1:{b.http_port}:{b.grpc_port}"],
            "ghost": [f"127.0.0.1:{a.http_port}:{a.grpc_port}"],
            "gone": [f"127.0.0.1:{free_port()}:{free_port()}"],
        }


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, frontend_workers: int) -> Iterator[Pair]:
    folder = tmp_path_factory.mktemp("peers")
    empty = folder / "empty-repository"
    empty.mkdir()
    peers_file = folder / "peers.json"
    explicit = ["--model-control-mode=explicit", "--load-model=simple"]
    with ServerProcess([EXAMPLES], explicit, frontend_workers=0) as b:
        a = ServerProcess([empty], [f"--peers-file={peers_file}"], frontend_workers=frontend_workers)
        result = Pair(a, b, peers_file)
        result.write_peers(result.default_peers())
        with a:
            yield result


def _inputs(module: object) -> tuple[list[object], np.ndarray, np.ndarray]:
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    y = np.full((1, 16), 3, dtype=np.int32)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]  # type: ignore[attr-defined]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(y)
    return inputs, x, y


def _forwarded_count(server: ServerProcess, model: str) -> float:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    match = re.search(rf'^naiad_forwarded_requests_total{{model="{model}"}} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def _wait_for_count(server: ServerProcess, model: str, at_least: float) -> float:
    """Workers count their forwards in the engine in the background: wait for them to arrive."""
    deadline = time.monotonic() + 10
    while (count := _forwarded_count(server, model)) < at_least and time.monotonic() < deadline:
        time.sleep(0.05)
    return count


def test_http_and_grpc_requests_get_the_peers_answers(pair: Pair) -> None:
    before = _forwarded_count(pair.a, "simple")
    http = httpclient.InferenceServerClient(pair.a.http_url)
    inputs, x, y = _inputs(httpclient)
    answer = http.infer("simple", inputs)
    np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), x + y)
    np.testing.assert_array_equal(answer.as_numpy("OUTPUT1"), x - y)
    assert answer.get_response()["model_name"] == "simple"
    assert http.get_model_metadata("simple")["inputs"][0]["name"] == "INPUT0"
    assert http.get_model_config("simple")["max_batch_size"] == 8
    assert http.is_model_ready("simple")
    # A holds nothing: the answers were B's
    assert http.get_model_repository_index() == []
    http.close()

    grpc = grpcclient.InferenceServerClient(pair.a.grpc_url)
    inputs, x, y = _inputs(grpcclient)
    answer = grpc.infer("simple", inputs, request_id="r1")
    np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), x + y)
    assert answer.get_response().id == "r1"
    assert grpc.get_model_metadata("simple").platform == "onnxruntime_onnx"
    assert grpc.get_model_config("simple").config.max_batch_size == 8
    assert grpc.is_model_ready("simple")

    results: queue.Queue[object] = queue.Queue()
    grpc.start_stream(callback=lambda result, error: results.put(error or result))
    for i in range(3):
        grpc.async_stream_infer("simple", inputs, request_id=f"s{i}")
    streamed = [results.get(timeout=10) for _ in range(3)]
    grpc.stop_stream()
    grpc.close()
    assert [r.get_response().id for r in streamed] == ["s0", "s1", "s2"]  # type: ignore[attr-defined]
    for result in streamed:
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), x - y)  # type: ignore[attr-defined]
    # every model endpoint and inference request above was forwarded once: 4 HTTP, 4 gRPC, 3 streamed
    assert _wait_for_count(pair.a, "simple", before + 11) == before + 11


def test_a_forwarded_request_is_never_forwarded_again(pair: Pair) -> None:
    http = httpclient.InferenceServerClient(pair.a.http_url)
    inputs, _, _ = _inputs(httpclient)
    with pytest.raises(InferenceServerException) as caught:
        http.infer("simple", inputs, headers={"naiad-forwarded": "1"})
    assert "unknown model: 'simple'" in caught.value.message()
    # ghost: A's peers file names A itself; the request comes back once, is refused, and that is relayed
    before = _forwarded_count(pair.a, "ghost")
    with pytest.raises(InferenceServerException) as caught:
        http.infer("ghost", inputs)
    assert caught.value.status() == "404"  # as for any unknown model
    assert "unknown model: 'ghost'" in caught.value.message()
    http.close()
    grpc = grpcclient.InferenceServerClient(pair.a.grpc_url)
    inputs, _, _ = _inputs(grpcclient)
    with pytest.raises(InferenceServerException) as caught:
        grpc.infer("simple", inputs, headers={"naiad-forwarded": "1"})
    assert "unknown model: 'simple'" in caught.value.message()
    with pytest.raises(InferenceServerException) as caught:
        grpc.infer("ghost", inputs)
    assert caught.value.status() == "StatusCode.NOT_FOUND"
    grpc.close()
    assert _wait_for_count(pair.a, "ghost", before + 2) == before + 2


def test_an_unreachable_peer_is_a_clear_503(pair: Pair) -> None:
    body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": [1]}]})
    request = urllib.request.Request(
        f"http://{pair.a.http_url}/v2/models/gone/infer", data=body.encode(), method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code == 503
    error = json.loads(caught.value.read())["error"]
    assert error.startswith("model 'gone' is served by peer 127.0.0.1:") and "cannot be reached" in error

    grpc = grpcclient.InferenceServerClient(pair.a.grpc_url)
    inputs, _, _ = _inputs(grpcclient)
    with pytest.raises(InferenceServerException) as caught_grpc:
        grpc.infer("gone", inputs)
    grpc.close()
    assert caught_grpc.value.status() == "StatusCode.UNAVAILABLE"
    assert "model 'gone' is served by peer 127.0.0.1:" in caught_grpc.value.message()
    # the server still serves what it can
    http = httpclient.InferenceServerClient(pair.a.http_url)
    inputs, x, y = _inputs(httpclient)
    np.testing.assert_array_equal(http.infer("simple", inputs).as_numpy("OUTPUT0"), x + y)
    http.close()


def _wait_for_answers(http: httpclient.InferenceServerClient, inputs: list[object], forwarded: bool) -> str:
    """Ask until 5 answers in a row are forwarded (or all refused); return the last refusal's message."""
    deadline = time.monotonic() + 10
    in_a_row, message = 0, ""
    while in_a_row < 5:
        assert time.monotonic() < deadline, f"the peers file change was not picked up: {message!r}"
        try:
            http.infer("simple", inputs)
            ok = forwarded
        except InferenceServerException as error:
            message = error.message()
            ok = not forwarded
        in_a_row = in_a_row + 1 if ok else 0
        if not ok:
            time.sleep(0.1)
    return message


def test_a_changed_peers_file_is_picked_up(pair: Pair) -> None:
    http = httpclient.InferenceServerClient(pair.a.http_url)
    inputs, x, y = _inputs(httpclient)
    try:
        pair.write_peers({})
        # each frontend worker reads the file on its own once a second, and a client's connections may
        # land on different workers: wait until every connection's answer has changed
        refused = _wait_for_answers(http, inputs, forwarded=False)
        assert "unknown model: 'simple'" in refused
    finally:
        pair.write_peers(pair.default_peers())
    _wait_for_answers(http, inputs, forwarded=True)
    np.testing.assert_array_equal(http.infer("simple", inputs).as_numpy("OUTPUT0"), x + y)
    # a file that does not parse (a half-written edit) leaves the last good table in force
    try:
        pair.peers_file.write_text('{"models": {"simple": ["no-ports"]}}')
        time.sleep(1.5)  # past the server's once-a-second look at the file
        np.testing.assert_array_equal(http.infer("simple", inputs).as_numpy("OUTPUT0"), x + y)
    finally:
        pair.write_peers(pair.default_peers())
    http.close()
