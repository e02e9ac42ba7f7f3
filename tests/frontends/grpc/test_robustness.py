"""Large tensors within and beyond the message limit, malformed messages, concurrent clients.

After each abuse the same server must still answer a normal request.
"""

from __future__ import annotations

import asyncio
import queue
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg
from tritonclient.utils import InferenceServerException

from tests.support.server import ServerProcess

MIB = 1024 * 1024


def _identity(client: Any, data: np.ndarray[Any, Any], module: Any = grpcclient) -> Any:
    tensor = module.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return client.infer("identity_fp32", [tensor])


def _still_serving(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        data = np.arange(8, dtype=np.float32).reshape(1, 8)
        np.testing.assert_array_equal(_identity(client, data).as_numpy("OUTPUT0"), data)


def test_a_64_mib_tensor_round_trips_within_the_default_limit(grpc_server: ServerProcess) -> None:
    data = np.random.default_rng(0).random((1, 16 * MIB), dtype=np.float32)
    with grpcclient.InferenceServerClient(grpc_server.grpc_url) as client:
        np.testing.assert_array_equal(_identity(client, data).as_numpy("OUTPUT0"), data)


def test_a_message_beyond_the_configured_limit_is_refused(limited_server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(limited_server.grpc_url) as client:
        within = np.ones((1, 4 * MIB), dtype=np.float32)  # 16 MiB, compressed on the way back
        np.testing.assert_array_equal(_identity(client, within).as_numpy("OUTPUT0"), within)
        with pytest.raises(InferenceServerException) as info:
            _identity(client, np.ones((1, 16 * MIB), dtype=np.float32))
        assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    _still_serving(limited_server)


@pytest.mark.parametrize("method", ["ModelInfer", "ServerLive", "ModelMetadata", "RepositoryIndex"])
def test_malformed_protobuf_is_invalid_argument(grpc_server: ServerProcess, method: str) -> None:
    with grpc.insecure_channel(grpc_server.grpc_url) as channel:
        call = channel.unary_unary(
            f"/inference.GRPCInferenceService/{method}",
            request_serializer=lambda data: data,
            response_deserializer=lambda data: data,
        )
        for garbage in (b"\xff\xff\xff\xff garbage", b"\x0a\x10short", b"\x3a\xff\xff\xff\xff\x0f"):
            with pytest.raises(grpc.RpcError) as info:
                call(garbage)
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
            assert info.value.details() == "Unable to parse request"  # type: ignore[attr-defined]
    _still_serving(grpc_server)


def test_raw_contents_may_come_in_any_field_order(grpc_server: ServerProcess) -> None:
    request = pb.ModelInferRequest(model_name="identity_fp32", id="x")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2])
    raw = pb.ModelInferRequest(raw_input_contents=[np.array([1, 2], np.float32).tobytes()])
    body = raw.SerializeToString() + request.SerializeToString()  # raw first, then the rest
    with grpc.insecure_channel(grpc_server.grpc_url) as channel:
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=lambda data: data,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        response = call(body)
    assert response.id == "x"
    np.testing.assert_array_equal(grpcclient.InferResult(response).as_numpy("OUTPUT0"), [[1, 2]])


def test_concurrent_sync_clients(grpc_server: ServerProcess) -> None:
    def work(seed: int) -> None:
        with grpcclient.InferenceServerClient(grpc_server.grpc_url) as client:
            for i in range(25):
                data = np.full((1, 64), seed * 1000 + i, dtype=np.float32)
                np.testing.assert_array_equal(_identity(client, data).as_numpy("OUTPUT0"), data)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))


def test_concurrent_aio_requests(grpc_server: ServerProcess) -> None:
    async def run() -> None:
        async with aioclient.InferenceServerClient(grpc_server.grpc_url) as client:
            data = [np.full((1, 16), i, dtype=np.float32) for i in range(200)]
            results = await asyncio.gather(*(_identity(client, d, aioclient) for d in data))
            for expected, result in zip(data, results, strict=True):
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)

    asyncio.run(run())


def test_sigterm_ends_open_streams_and_exits_zero(grpc_repository: Path, frontend_workers: int) -> None:
    server = ServerProcess(
        [grpc_repository], ["--exit-timeout-secs=5"], frontend_workers=frontend_workers
    ).start()
    with grpc.insecure_channel(server.grpc_url) as channel:
        requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        stream = pbg.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter(requests.get, None))
        request = pb.ModelInferRequest(model_name="identity_fp32", id="open")
        request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1])
        request.raw_input_contents.append(np.float32(1).tobytes())
        requests.put(request)
        assert next(stream).infer_response.id == "open"
        started = time.monotonic()
        assert server.stop() == 0
        assert time.monotonic() - started < 4  # an idle stream does not hold the 5 s grace
        assert next(stream, None) is None  # ended with status OK
