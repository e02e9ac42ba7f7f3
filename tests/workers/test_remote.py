"""A frontend worker's data plane against a real engine, in one process over a real socketpair: plain
gRPC requests sent as their wire bytes answer with the bytes the general path gives, and give back
every block of both arenas; what the worker's checks refuse is left to the general path."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from naiad.backends.runtime import Runtime
from naiad.codecs import grpc_v2
from naiad.core.shm import SharedMemoryRegistry
from naiad.dataplane import DataPlane
from naiad.engine import catalog
from naiad.engine.link import PublishedSignatures, WorkerLink
from naiad.ipc import arena
from naiad.ipc.arena import Arena
from naiad.ipc.channel import connect
from naiad.ipc.messages import ToEngine, ToWorker
from naiad.repository.manager import ModelRepository
from naiad.repository.registry import ModelRegistry
from naiad.settings import ServerSettings
from naiad.workers.remote import CatalogCopy, EngineLink, RemoteDataPlane
from naiad.workers.tracer import WorkerTracer
from tritonclient.grpc import service_pb2 as pb

from tests.support.models import IDENTITY_PY, write_model

SIZE = 8 << 20
LASTING = 1 << 20
IN_ENGINE = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }'

#: Two outputs computed anew (in the response arena when large) and one that is the input itself (a
#: view of the worker's request arena when large).
THREE_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            outputs = [pb_utils.Tensor("DOUBLED", x * 2), pb_utils.Tensor("NEGATED", -x), pb_utils.Tensor("SAME", x)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""


def three_config(data_type: str) -> str:
    return f"""
    name: "three_{data_type.lower()}"
    backend: "python"
    max_batch_size: 8
    input [ {{ name: "X" data_type: TYPE_{data_type} dims: [ -1 ] }} ]
    output [
      {{ name: "DOUBLED" data_type: TYPE_{data_type} dims: [ -1 ] }},
      {{ name: "NEGATED" data_type: TYPE_{data_type} dims: [ -1 ] }},
      {{ name: "SAME" data_type: TYPE_{data_type} dims: [ -1 ] }}
    ]
    {IN_ENGINE}
    """


IDENTITY_BYTES = f"""
name: "identity_bytes"
backend: "python"
input [ {{ name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] }} ]
{IN_ENGINE}
"""

DECOUPLED = f"""
name: "decoupled"
backend: "python"
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
{IN_ENGINE}
"""


#: Answers after 3 s, from a model process of its own (the loop stays free meanwhile): longer than
#: ``_drained`` waits, so a block given back in time was given back by a cancellation.
SLOW_PY = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(3.0)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""

SLOW = """
name: "slow"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    for data_type in ("FP32", "INT8", "FP16", "UINT64"):
        write_model(root, f"three_{data_type.lower()}", three_config(data_type), THREE_PY)
    write_model(root, "identity_bytes", IDENTITY_BYTES, IDENTITY_PY)
    write_model(root, "decoupled", DECOUPLED, IDENTITY_PY)
    write_model(root, "slow", SLOW, SLOW_PY)
    return root


@dataclass
class _Pair:
    """A real engine and a real worker data plane joined by a channel, with both ends of both arenas."""

    dataplane: RemoteDataPlane
    worker_requests: Arena
    engine_responses: Arena


async def _calls(method: str, args: list[msgspec.Raw]) -> Any:
    raise AssertionError(f"no control call expected, got {method}")


@asynccontextmanager
async def _pair(repo: Path) -> AsyncIterator[_Pair]:
    runtime = Runtime()
    registry = ModelRegistry()
    models = ModelRepository([repo], registry=registry, runtime=runtime)
    engine = DataPlane(registry, models)
    await models.start()
    engine.started = True
    request_fd = arena.create("requests", SIZE)
    response_fd = arena.create("responses", SIZE + LASTING)
    # mapped as naiad.engine.workers and naiad.workers.process map them
    engine_requests = Arena(request_fd, SIZE, writable=True)
    engine_responses = Arena(response_fd, SIZE + LASTING, writable=True, lasting=LASTING)
    worker_requests = Arena(request_fd, SIZE, writable=True)
    worker_responses = Arena(response_fd, SIZE + LASTING, writable=False)
    published = PublishedSignatures()
    published.update(1, registry.models())
    engine_link = WorkerLink(0, engine, engine_requests, engine_responses, _calls, lambda _: None, published)
    engine_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    engine_end.setblocking(False)
    worker_end.setblocking(False)
    tracer = WorkerTracer(None, lambda message: link.send(message))
    link = EngineLink(worker_requests, worker_responses, CatalogCopy(), SharedMemoryRegistry(False), tracer)
    link.catalog.apply(catalog.catalog(1, registry.models(), True, True))
    engine_channel = await connect(
        engine_end, ToEngine, engine_link.on_message, engine_link.on_lost, engine_link.bind
    )
    worker_channel = await connect(worker_end, ToWorker, link.on_message, link.on_lost, link.bind)
    try:
        yield _Pair(RemoteDataPlane(link, ServerSettings()), worker_requests, engine_responses)
    finally:
        worker_channel.close()
        engine_channel.close()
        await models.close()
        runtime.close()


def _request(model: str, inputs: list[grpcclient.InferInput], outputs: list[str] | None = None) -> bytes:
    """A ``ModelInferRequest`` as tritonclient builds it."""
    message = pb.ModelInferRequest(model_name=model, id="req-1")
    for item in inputs:
        message.inputs.extend([item._get_tensor()])
        message.raw_input_contents.extend([item._get_content()])
    for name in outputs or ():
        message.outputs.extend([grpcclient.InferRequestedOutput(name)._get_tensor()])
    return message.SerializeToString()


def _input(name: str, array: np.ndarray[Any, Any], datatype: str) -> grpcclient.InferInput:
    item = grpcclient.InferInput(name, list(array.shape), datatype)
    item.set_data_from_numpy(array)
    return item


async def _general(dataplane: RemoteDataPlane, data: bytes) -> bytes:
    """The answer through the general path: decoded into arrays, answered, encoded from arrays."""
    parsed = grpc_v2.parse_infer_request(data)
    response = await dataplane.infer(grpc_v2.to_infer_request(parsed, {}))
    return grpc_v2.encode_infer_response(response)


async def _plain(dataplane: RemoteDataPlane, data: bytes) -> bytes | None:
    plain = grpc_v2.plain_request(grpc_v2.parse_infer_request(data))
    assert plain is not None
    return await dataplane.infer_plain(plain, {}, grpc_v2.encode_plain_response)


async def _drained(pair: _Pair) -> tuple[int, int]:
    """Blocks in use in the worker's request arena and the engine's response arena once the worker's
    releases reached the engine."""
    for _ in range(100):
        await asyncio.sleep(0.01)
        if not pair.worker_requests.in_use and not pair.engine_responses.in_use:
            break
    return pair.worker_requests.in_use, pair.engine_responses.in_use


CASES = {
    "small FP32, all outputs": ("three_fp32", np.arange(8, dtype=np.float32).reshape(1, 8), "FP32", None),
    "large FP32 (arenas), two outputs asked": (
        "three_fp32",
        np.random.default_rng(0).random((2, 150_000), dtype=np.float32),
        "FP32",
        ["SAME", "NEGATED"],
    ),
    "large message parsed in place (above 64 KiB)": (
        "three_int8",
        np.arange(100_000, dtype=np.int8).reshape(1, 100_000),
        "INT8",
        ["DOUBLED"],
    ),
    "FP16": ("three_fp16", np.linspace(-2, 2, 24, dtype=np.float16).reshape(3, 8), "FP16", None),
    "UINT64 large": ("three_uint64", np.arange(3000, dtype=np.uint64).reshape(1, 3000), "UINT64", None),
}


@pytest.mark.parametrize("case", CASES)
def test_a_plain_request_answers_with_the_general_paths_bytes_and_gives_back_every_block(
    repo: Path, case: str
) -> None:
    model, array, datatype, outputs = CASES[case]
    data = _request(model, [_input("X", array, datatype)], outputs)

    async def scenario() -> tuple[bytes | None, bytes, tuple[int, int]]:
        async with _pair(repo) as pair:
            plain = await _plain(pair.dataplane, data)
            general = await _general(pair.dataplane, data)
            return plain, general, await _drained(pair)

    plain, general, in_use = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert plain == general
    answer = pb.ModelInferResponse.FromString(plain)
    named = [output.name for output in answer.outputs]
    assert named == [name for name in ("DOUBLED", "NEGATED", "SAME") if outputs is None or name in outputs]
    expected = {"DOUBLED": array * 2, "NEGATED": -array, "SAME": array}
    for output, raw in zip(answer.outputs, answer.raw_output_contents, strict=True):
        assert list(output.shape) == list(array.shape)
        got = np.frombuffer(raw, dtype=array.dtype).reshape(array.shape)
        np.testing.assert_array_equal(got, expected[output.name])
    assert in_use == (0, 0)


def test_what_the_workers_checks_refuse_is_left_to_the_general_path(repo: Path) -> None:
    """A request the catalog refuses (its model, datatype, shape, input or output names) or that goes
    to a decoupled model: ``infer_plain`` sends nothing and answers ``None``, and the general path
    gives the single process's error."""
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    refused = {
        "unknown model": _request("missing", [_input("X", x, "FP32")]),
        "datatype": _request("three_int8", [_input("X", x, "FP32")]),
        "shape": _request("three_fp32", [_input("X", x.reshape(4), "FP32")]),
        "input name": _request("three_fp32", [_input("Y", x, "FP32")]),
        "output name": _request("three_fp32", [_input("X", x, "FP32")], ["NOPE"]),
        "decoupled": _request("decoupled", [_input("INPUT0", x.reshape(4), "FP32")]),
    }

    async def scenario() -> dict[str, tuple[bytes | None, int]]:
        async with _pair(repo) as pair:
            return {
                case: (await _plain(pair.dataplane, data), pair.worker_requests.in_use)
                for case, data in refused.items()
            }

    for case, (answer, in_use) in asyncio.run(asyncio.wait_for(scenario(), 60)).items():
        assert (answer, in_use) == (None, 0), case


def test_a_plain_request_given_up_is_cancelled_and_its_block_comes_back(repo: Path) -> None:
    """The caller stops waiting (a client that cancels, a deadline): the engine cancels the request,
    its input's block in the request arena is given back once the engine's final answer says it no
    longer reads it, and the next request is served."""
    big = np.arange(2_000, dtype=np.float32)  # 8 KB: through the request arena
    small = np.arange(4, dtype=np.float32).reshape(1, 4)

    async def scenario() -> tuple[int, bool, tuple[int, int], bytes | None]:
        async with _pair(repo) as pair:
            given_up = asyncio.ensure_future(
                _plain(pair.dataplane, _request("slow", [_input("INPUT0", big, "FP32")]))
            )
            await asyncio.sleep(0.2)
            held = pair.worker_requests.in_use
            given_up.cancel()
            try:
                await given_up
                cancelled = False
            except asyncio.CancelledError:
                cancelled = True
            drained = await _drained(pair)
            after = await _plain(pair.dataplane, _request("three_fp32", [_input("X", small, "FP32")]))
            return held, cancelled, drained, after

    held, cancelled, drained, after = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert (held, cancelled, drained) == (1, True, (0, 0))
    assert after is not None
    answer = pb.ModelInferResponse.FromString(after)
    np.testing.assert_array_equal(
        np.frombuffer(answer.raw_output_contents[0], np.float32), (small * 2).ravel()
    )
