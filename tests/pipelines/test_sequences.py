"""The sequence batcher: many sequences interleaved at once (more than the slots, so some wait in the
backlog), control tensors, numeric and string correlation IDs, implicit state, the idle timeout and
Triton's errors; and Triton's own ONNX sequence models (``simple_sequence``, ``simple_dyna_sequence``)."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

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
    with pytest.raises(InferenceServerException) as info:
        client.infer("accumulator", _input(httpclient, 1), sequence_id="text", sequence_start=True)
    assert (
        "has string correlation ID 'text', but the model's CORRID control 'CORRID' is UINT64"
        in info.value.message()
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
