"""The sequence batcher: many sequences interleaved at once (more than the slots, so some wait in the
backlog), control tensors, numeric and string correlation IDs, implicit state, the idle timeout and
Triton's errors; direct batches that keep each sequence at its slot's position (null requests in the
gaps); initial states read from files; and Triton's own ONNX sequence models (``simple_sequence``,
``simple_dyna_sequence``)."""

from __future__ import annotations

import queue
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from tests.pipelines.models import write_seeded
from tests.support.models import write_model
from tests.support.server import TRITON_EXAMPLES, ServerProcess

VALUES = [3, 1, 4, 1, 5]


def _input(module: Any, value: int, batch: int = 1) -> list[Any]:
    tensor = module.InferInput("INPUT", [batch, 1], "INT32")
    tensor.set_data_from_numpy(np.full((batch, 1), value, dtype=np.int32))
    return [tensor]


def _run_sequence(
    client: Any, module: Any, model: str, sequence_id: int | str, values: list[int]
) -> list[int]:
    outputs = []
    for index, value in enumerate(values):
        result = client.infer(
            model,
            _input(module, value),
            sequence_id=sequence_id,
            sequence_start=index == 0,
            sequence_end=index == len(values) - 1,
        )
        outputs.append(int(result.as_numpy("OUTPUT").reshape(-1)[0]))
    return outputs


def _accumulated(values: list[int]) -> list[int]:
    """What simple_sequence's accumulator answers: (INPUT + START) summed."""
    totals, total = [], 0
    for index, value in enumerate(values):
        total += value + (index == 0)
        totals.append(total)
    return totals


@pytest.mark.parametrize(
    ("model", "ids"),
    [("accumulator", range(1000, 1024)), ("dyna_accumulator", [f"seq-{i}" for i in range(24)])],
)
def test_many_sequences_interleaved(server: ServerProcess, model: str, ids: Any) -> None:
    """24 concurrent sequences over 8 (direct) or 16 (oldest) slots, half over HTTP, half over gRPC."""

    def one(position: int, sequence_id: int | str) -> list[int]:
        values = [v + position for v in VALUES]
        if position % 2:
            client = httpclient.InferenceServerClient(server.http_url)
            try:
                return _run_sequence(client, httpclient, model, sequence_id, values) == _accumulated(values)
            finally:
                client.close()
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
            return _run_sequence(grpc_client, grpcclient, model, sequence_id, values) == _accumulated(values)

    with ThreadPoolExecutor(24) as pool:
        assert all(pool.map(one, range(24), ids))


def test_a_sequence_over_a_grpc_stream(server: ServerProcess) -> None:
    """As Triton's simple_grpc_sequence_stream_infer_client: two sequences interleaved on one stream."""
    answers: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for index, value in enumerate(VALUES):
            for sequence_id in ("left", "right"):
                client.async_stream_infer(
                    "dyna_accumulator",
                    _input(grpcclient, value if sequence_id == "left" else -value, 1),
                    request_id=f"{sequence_id}_{index}",
                    sequence_id=sequence_id,
                    sequence_start=index == 0,
                    sequence_end=index == len(VALUES) - 1,
                )
        got: dict[str, list[int]] = {"left": [], "right": []}
        for _ in range(2 * len(VALUES)):
            result, error = answers.get(timeout=20)
            assert error is None
            got[result.get_response().id.split("_")[0]].append(int(result.as_numpy("OUTPUT")[0][0]))
        client.stop_stream()
    assert got == {"left": _accumulated(VALUES), "right": _accumulated([-v for v in VALUES])}


def test_implicit_state_is_carried_between_requests(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)

    def send(sequence_id: int, value: int, start: bool = False) -> int:
        result = client.infer(
            "stateful", _input(httpclient, value), sequence_id=sequence_id, sequence_start=start
        )
        assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT"]  # the state stays inside
        return int(result.as_numpy("OUTPUT")[0][0])

    assert [send(7, 5, start=True), send(8, 100, start=True), send(7, 2), send(8, 1), send(7, 3)] == [
        5,
        100,
        7,
        101,
        10,
    ]
    assert send(7, 1, start=True) == 1  # START again: a fresh state
    client.close()


def test_triton_errors(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        client.infer("accumulator", _input(httpclient, 1), sequence_id=424242)
    assert info.value.message() == (
        "inference request for sequence 424242 to model 'accumulator' must specify the START flag on the first "
        "request of the sequence"
    )
    with pytest.raises(InferenceServerException) as info:
        client.infer("accumulator", _input(httpclient, 1), sequence_start=True)
    assert info.value.message() == (
        "inference request to model 'accumulator' must specify a non-zero or non-empty correlation ID"
    )
    with pytest.raises(InferenceServerException) as info:
        client.infer("accumulator", _input(httpclient, 1, batch=2), sequence_id=5, sequence_start=True)
    assert info.value.message() == (
        "inference request to model 'accumulator' must specify batch-size 1 due to requirements of sequence batcher"
    )
    # the correlation ID's kind against the CORRID control's type: Triton 2.51's words, both ways
    with pytest.raises(InferenceServerException) as info:
        client.infer("accumulator", _input(httpclient, 1), sequence_id="text", sequence_start=True)
    assert info.value.message() == (
        "[request id: <id_unknown>] sequence batching control 'CORRID' data-type is 'BYTES', but model "
        "'accumulator' expects 'UINT64'"
    )
    with pytest.raises(InferenceServerException) as info:
        client.infer("dyna_accumulator", _input(httpclient, 1), sequence_id=12, sequence_start=True, request_id="r")
    assert info.value.message() == (
        "[request id: r] sequence batching control 'CORRID' data-type is 'UINT64', but model "
        "'dyna_accumulator' expects 'BYTES'"
    )
    client.close()
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as grpc_client,
        pytest.raises(InferenceServerException) as info,
    ):
        grpc_client.infer("dyna_accumulator", _input(grpcclient, 1), sequence_id="never-started")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert (
        "sequence never-started to model 'dyna_accumulator' must specify the START flag"
        in info.value.message()
    )


def test_an_idle_sequence_is_forgotten(server: ServerProcess) -> None:
    """``forgetful`` frees a sequence idle for 0.3 s: its next request is refused without START."""
    client = httpclient.InferenceServerClient(server.http_url)
    client.infer("forgetful", _input(httpclient, 1), sequence_id=77, sequence_start=True)
    assert int(client.infer("forgetful", _input(httpclient, 1), sequence_id=77).as_numpy("OUTPUT")[0][0]) == 3
    time.sleep(0.8)
    with pytest.raises(InferenceServerException, match="must specify the START flag on the first request"):
        client.infer("forgetful", _input(httpclient, 1), sequence_id=77)
    client.close()


# ---- Triton's ONNX sequence models --------------------------------------------------------------------


@pytest.fixture(scope="module")
def triton_examples() -> Iterator[ServerProcess]:
    if not (TRITON_EXAMPLES / "simple_sequence").is_dir():
        pytest.skip(f"Triton's example repository is not present at {TRITON_EXAMPLES}")
    with ServerProcess([TRITON_EXAMPLES]) as server:
        yield server


def test_simple_sequence(triton_examples: ServerProcess) -> None:
    """OUTPUT = (INPUT + START) * READY for each request of interleaved sequences."""

    def one(sequence_id: int) -> list[int]:
        client = httpclient.InferenceServerClient(triton_examples.http_url)
        try:
            return _run_sequence(client, httpclient, "simple_sequence", sequence_id, [sequence_id, 1, 2])
        finally:
            client.close()

    with ThreadPoolExecutor(12) as pool:
        for sequence_id, outputs in zip(range(1, 25), pool.map(one, range(1, 25)), strict=True):
            assert outputs == [sequence_id + 1, 1, 2]


def test_simple_dyna_sequence(triton_examples: ServerProcess) -> None:
    """OUTPUT = (INPUT + START + END * CORRID) * READY: the CORRID control carries the sequence ID."""

    def one(sequence_id: int) -> list[int]:
        with grpcclient.InferenceServerClient(triton_examples.grpc_url) as client:
            return _run_sequence(client, grpcclient, "simple_dyna_sequence", sequence_id, [10, 20, 30])

    with ThreadPoolExecutor(12) as pool:
        for sequence_id, outputs in zip(range(100, 124), pool.map(one, range(100, 124)), strict=True):
            assert outputs == [11, 20, 30 + sequence_id]


# ---- direct batch slots, null requests and initial states from files ----------------------------------


def _pending(server: ServerProcess, model: str) -> float:
    """The model's ``nv_inference_pending_request_count``: requests queued behind their sequence."""
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    for line in lines:
        if line.startswith("nv_inference_pending_request_count{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no pending count for {model}")


def _wait_for(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {condition}"
        time.sleep(0.01)


Slotted = tuple[int, int, list[tuple[int, ...]]]


def _slotted(
    server: ServerProcess,
    sequence_id: int,
    value: int,
    start: bool = False,
    end: bool = False,
    **parameters: str,
) -> Slotted:
    """One request to ``slotted`` on a client of its own: (position, total, what the batch was)."""
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        result = client.infer(
            "slotted",
            _input(httpclient, value),
            sequence_id=sequence_id,
            sequence_start=start,
            sequence_end=end,
            parameters=parameters or None,
        )
    finally:
        client.close()
    seen = [tuple(row) for row in result.as_numpy("SEEN").reshape(-1, 4).tolist()]
    return int(result.as_numpy("POSITION")[0][0]), int(result.as_numpy("TOTAL")[0][0]), seen


def test_direct_batches_keep_each_sequence_at_its_slot(server: ServerProcess, tmp_path: Path) -> None:
    """Each sequence holds the lowest free slot and is always at that batch position; the positions
    below it with nothing to run hold null requests (READY 0, CORRID 0, state 0) that answer nobody,
    count nowhere and whose state output (-999) never reaches a sequence."""
    null0, null1 = (0, 0, 0, 0), (1, 0, 0, 0)
    assert _slotted(server, 201, 1, start=True) == (0, 1, [(0, 1, 201, 0)])
    assert _slotted(server, 202, 10, start=True) == (1, 10, [null0, (1, 1, 202, 0)])
    assert _slotted(server, 203, 100, start=True) == (2, 100, [null0, null1, (2, 1, 203, 0)])
    assert _slotted(server, 201, 2, end=True) == (0, 3, [(0, 1, 201, 1)])  # frees slot 0 ...
    assert _slotted(server, 204, 1000, start=True) == (0, 1000, [(0, 1, 204, 0)])  # ... taken again
    assert _slotted(server, 202, 20) == (1, 30, [null0, (1, 1, 202, 10)])

    # While slot 0's request runs, slots 1 and 2 queue up and then run as one batch behind a null.
    gate = tmp_path / "gate"
    with ThreadPoolExecutor(3) as pool:
        held = pool.submit(_slotted, server, 204, 1, gate=str(gate))
        _wait_for(Path(f"{gate}.entered").exists)
        second = pool.submit(_slotted, server, 202, 5)
        third = pool.submit(_slotted, server, 203, 7, end=True)
        _wait_for(lambda: _pending(server, "slotted") == 2)
        gate.touch()
        batch = [null0, (1, 1, 202, 30), (2, 1, 203, 100)]
        assert held.result() == (0, 1001, [(0, 1, 204, 1000)])
        assert second.result() == (1, 35, batch)
        assert third.result() == (2, 107, batch)

    client = httpclient.InferenceServerClient(server.http_url)
    stats = client.get_inference_statistics("slotted")["model_stats"][0]
    client.close()
    assert (stats["inference_count"], stats["execution_count"]) == (9, 8)  # 9 requests, 8 batches
    assert stats["inference_stats"]["success"]["count"] == 9
    assert stats["inference_stats"]["fail"]["count"] == 0


def test_an_initial_state_from_a_data_file(server: ServerProcess) -> None:
    """``seeded`` starts every sequence from the INT32 40 in ``seeded/initial_state/seed.bin``."""
    client = httpclient.InferenceServerClient(server.http_url)

    def send(sequence_id: int, value: int, start: bool = False) -> int:
        result = client.infer(
            "seeded", _input(httpclient, value), sequence_id=sequence_id, sequence_start=start
        )
        return int(result.as_numpy("OUTPUT")[0][0])

    assert [send(31, 2, start=True), send(32, 5, start=True), send(31, 1), send(31, 3, start=True)] == [
        42,
        45,
        43,
        43,
    ]
    client.close()


def test_a_string_state_from_a_data_file(server: ServerProcess) -> None:
    """``seeded_text``: a TYPE_STRING state that starts as the one string ">" (length-prefixed in the
    file); the model appends each INPUT to it."""
    client = httpclient.InferenceServerClient(server.http_url)

    def send(sequence_id: int, text: bytes, start: bool = False) -> bytes:
        tensor = httpclient.InferInput("INPUT", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[text]], dtype=np.object_))
        result = client.infer("seeded_text", [tensor], sequence_id=sequence_id, sequence_start=start)
        return bytes(result.as_numpy("OUTPUT")[0][0])

    assert [send(41, b"a", start=True), send(42, b"x", start=True), send(41, b"b"), send(41, b"c")] == [
        b">a",
        b">x",
        b">ab",
        b">abc",
    ]
    client.close()


TEXT_STATE_ONNX = """
name: "text_state_onnx"
platform: "onnxruntime_onnx"
max_batch_size: 4
sequence_batching {
  control_input [{ name: "READY" control [{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }] }]
  state [{
    input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_STRING dims: [ 1 ]
    initial_state { name: "seed" data_type: TYPE_STRING dims: [ 1 ] data_file: "seed" }
  }]
}
input [{ name: "INPUT" data_type: TYPE_STRING dims: [ 1 ] }]
output [{ name: "OUTPUT" data_type: TYPE_STRING dims: [ 1 ] }, { name: "SEEN_READY" data_type: TYPE_INT32 dims: [ 1 ] }]
"""


def _write_text_state_onnx(repo: Path) -> None:
    """An ONNX model with a string state: OUTPUT is the state it got, STATE_OUT the request's INPUT;
    SEEN_READY echoes READY (a batch with a null request is still split right)."""
    text, flag = TensorProto.STRING, TensorProto.INT32
    inputs = [helper.make_tensor_value_info(n, t, ["b", 1]) for n, t in (("INPUT", text), ("STATE_IN", text))]
    inputs.append(helper.make_tensor_value_info("READY", flag, ["b", 1]))
    outputs = [helper.make_tensor_value_info(n, text, ["b", 1]) for n in ("OUTPUT", "STATE_OUT")]
    outputs.append(helper.make_tensor_value_info("SEEN_READY", flag, ["b", 1]))
    nodes = [
        helper.make_node("Identity", [source], [target])
        for source, target in (("STATE_IN", "OUTPUT"), ("INPUT", "STATE_OUT"), ("READY", "SEEN_READY"))
    ]
    graph = helper.make_graph(nodes, "text_state", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    model_dir = write_model(repo, "text_state_onnx", TEXT_STATE_ONNX)
    onnx.save(model, str(model_dir / "1" / "model.onnx"))
    (model_dir / "initial_state").mkdir()
    (model_dir / "initial_state" / "seed").write_bytes(b"\x04\x00\x00\x00seed")


@pytest.fixture(scope="module")
def initial_states(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, dict[str, Any]]]:
    """A server over models whose initial states come from files, good and bad, and its repository
    index once every model has settled (bad models make it unready, so it is not waited for)."""
    repo = tmp_path_factory.mktemp("initial-states")
    write_seeded(repo, "seeded", "seed.bin", (40).to_bytes(4, "little", signed=True))
    write_seeded(repo, "short_seed", "seed.bin", b"\x01\x00")
    write_seeded(repo, "escaping_seed", "../escape.bin", bytes(4))
    _write_text_state_onnx(repo)
    names = {"seeded", "short_seed", "escaping_seed", "text_state_onnx"}
    with ServerProcess([repo], ["--exit-on-error=false"], wait_ready=False) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        deadline = time.monotonic() + 60
        while True:
            index = {entry["name"]: entry for entry in client.get_model_repository_index()}
            if all(index.get(n, {}).get("state") in ("READY", "UNAVAILABLE") for n in names):
                break
            assert time.monotonic() < deadline, index
            time.sleep(0.05)
        client.close()
        yield server, index


def test_a_bad_initial_state_file_fails_only_its_model(
    initial_states: tuple[ServerProcess, dict[str, Any]],
) -> None:
    """A file of the wrong size, or a name leaving the ``initial_state`` folder (here a file that does
    exist, one level up), fails that model's load with the reason; the others load and serve."""
    server, index = initial_states
    assert index["seeded"]["state"] == "READY"
    assert index["short_seed"]["state"] == "UNAVAILABLE"
    assert (
        "initial_state of state 'STATE_IN' of model 'short_seed' expects 4 bytes (1 INT32 elements), "
        "but data_file 'seed.bin' only has 2 bytes" in index["short_seed"]["reason"]
    )
    assert index["escaping_seed"]["state"] == "UNAVAILABLE"
    assert (
        "data_file '../escape.bin' must be a path relative to the model's 'initial_state' folder"
        in index["escaping_seed"]["reason"]
    )
    client = httpclient.InferenceServerClient(server.http_url)
    result = client.infer("seeded", _input(httpclient, 2), sequence_id=1, sequence_start=True)
    assert int(result.as_numpy("OUTPUT")[0][0]) == 42
    client.close()


def test_an_onnx_string_state_behind_null_requests(
    initial_states: tuple[ServerProcess, dict[str, Any]],
) -> None:
    """ONNX Runtime gets the string state from the file, then each request's INPUT as the next state;
    the second sequence's requests run at position 1, behind a null request, and are answered alone."""
    server, index = initial_states
    assert index["text_state_onnx"]["state"] == "READY", index["text_state_onnx"]
    client = httpclient.InferenceServerClient(server.http_url)

    def send(sequence_id: int, text: bytes, start: bool = False) -> tuple[bytes, int]:
        tensor = httpclient.InferInput("INPUT", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[text]], dtype=np.object_))
        result = client.infer("text_state_onnx", [tensor], sequence_id=sequence_id, sequence_start=start)
        return bytes(result.as_numpy("OUTPUT")[0][0]), int(result.as_numpy("SEEN_READY")[0][0])

    answers = [
        send(1, b"a", start=True),
        send(2, b"x", start=True),
        send(2, b"y"),
        send(1, b"b"),
        send(2, b"z"),
    ]
    assert answers == [(b"seed", 1), (b"seed", 1), (b"x", 1), (b"a", 1), (b"y", 1)]
    stats = client.get_inference_statistics("text_state_onnx")["model_stats"][0]
    assert (stats["inference_count"], stats["execution_count"]) == (5, 5)
    client.close()


def test_simple_sequence_behind_a_null_request(triton_examples: ServerProcess) -> None:
    """ONNX Runtime gets a null request at slot 0 while only the sequence in slot 1 has a request: the
    two are batched as one [2, 1] call and the real request's answer is unaffected."""
    client = httpclient.InferenceServerClient(triton_examples.http_url)
    try:
        first, second = 9001, 9002
        assert _run_sequence(client, httpclient, "simple_sequence", first, [5]) == [6]  # ends: frees slot 0
        values = []
        for sequence_id, start in ((first, True), (second, True), (second, False), (second, False)):
            result = client.infer(
                "simple_sequence",
                _input(httpclient, 3),
                sequence_id=sequence_id,
                sequence_start=start,
            )
            values.append(int(result.as_numpy("OUTPUT")[0][0]))
        assert values == [4, 4, 3, 3]
    finally:
        client.close()
