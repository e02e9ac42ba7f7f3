"""ModelStreamInfer: in-order answers, errors in-band on a stream that stays open, ids echoed."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

from tests.support.models import identity_config, write_model
from tests.support.server import ServerProcess


def _add_sub_request(index: int) -> Any:
    request = pb.ModelInferRequest(model_name="add_sub", id=f"r{index}")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[4])
        request.raw_input_contents.append(np.full(4, index, dtype=np.float32).tobytes())
    return request


def _bad_request(index: int) -> Any:
    """A different client mistake each time: unknown model, short data, reserved parameter."""
    request = _add_sub_request(index)
    kind = index % 3
    if kind == 0:
        request.model_name = "nope"
    elif kind == 1:
        request.raw_input_contents[0] = b"\0" * 3
    else:
        request.parameters["triton_nope"].bool_param = True
    return request


def test_a_thousand_requests_with_bad_ones_interleaved(grpc_server: ServerProcess) -> None:
    bad = {i for i in range(1000) if i % 7 == 3}
    requests = [_bad_request(i) if i in bad else _add_sub_request(i) for i in range(1000)]
    with grpc.insecure_channel(grpc_server.grpc_url) as channel:
        responses = list(pbg.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter(requests)))
    assert len(responses) == 1000
    for i, response in enumerate(responses):
        assert response.infer_response.id == f"r{i}"
        if i in bad:
            assert response.error_message
            assert not response.infer_response.outputs
            continue
        assert response.error_message == ""
        infer = response.infer_response
        assert (infer.model_name, infer.model_version) == ("add_sub", "1")
        assert infer.parameters["triton_final_response"].bool_param is True
        result = grpcclient.InferResult(infer)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full(4, 2 * i, dtype=np.float32))
    assert responses[3].error_message == "Request for unknown model: 'nope' is not found"
    assert responses[10].error_message.startswith("[request id: r10] input byte size mismatch")


def test_malformed_messages_are_answered_in_band(grpc_server: ServerProcess) -> None:
    good = _add_sub_request(1).SerializeToString()
    with grpc.insecure_channel(grpc_server.grpc_url) as channel:
        call = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=lambda data: data,
            response_deserializer=pb.ModelStreamInferResponse.FromString,
        )
        responses = list(call(iter([good, b"\xff\xff\xff", good])))
    assert [r.error_message for r in responses] == ["", "Unable to parse request", ""]
    assert [r.infer_response.id for r in responses] == ["r1", "", "r1"]


def test_tritonclient_stream_reports_errors_through_its_callback(grpc_server: ServerProcess) -> None:
    results: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    with grpcclient.InferenceServerClient(grpc_server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        for i in range(5):
            inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"), grpcclient.InferInput("INPUT1", [4], "FP32")]
            for tensor in inputs:
                tensor.set_data_from_numpy(np.full(4, i, dtype=np.float32))
            client.async_stream_infer("add_sub" if i != 2 else "nope", inputs, request_id=str(i))
        client.stop_stream()
    answers = [results.get(timeout=10) for _ in range(5)]
    assert [r.get_response().id if r is not None else None for r, _ in answers] == ["0", "1", None, "3", "4"]
    assert "unknown model" in str(answers[2][1])


def test_aio_client_streams(grpc_server: ServerProcess) -> None:
    async def run() -> list[tuple[Any, Any]]:
        async with aioclient.InferenceServerClient(grpc_server.grpc_url) as client:

            async def requests() -> AsyncIterator[dict[str, Any]]:
                for i in range(50):
                    inputs = [aioclient.InferInput("INPUT0", [4], "FP32"), aioclient.InferInput("INPUT1", [4], "FP32")]
                    for tensor in inputs:
                        tensor.set_data_from_numpy(np.full(4, i, dtype=np.float32))
                    yield {"model_name": "add_sub", "inputs": inputs, "request_id": str(i)}

            return [answer async for answer in client.stream_infer(requests())]

    answers = asyncio.run(run())
    assert [error for _, error in answers] == [None] * 50
    assert [result.get_response().id for result, _ in answers] == [str(i) for i in range(50)]


FAILING_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x[0] < 0:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative")))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""


def test_triton_grpc_error_header_ends_the_stream_at_the_first_model_error(
    tmp_path: Path, frontend_workers: int
) -> None:
    """Triton's opt-in (``triton_grpc_error: true`` when the stream starts): a model's error closes the
    stream with its gRPC status; a request refused before the model runs is still answered in-band."""
    write_model(tmp_path, "failing", identity_config("failing", "TYPE_INT32"), FAILING_PY)

    def request(model: str, value: int) -> Any:
        message = pb.ModelInferRequest(model_name=model, id=f"{model}{value}")
        message.inputs.add(name="INPUT0", datatype="INT32", shape=[1])
        message.raw_input_contents.append(np.array([value], dtype=np.int32).tobytes())
        return message

    requests = [request("failing", 1), request("nope", 1), request("failing", -1), request("failing", 2)]
    with (
        ServerProcess([tmp_path], frontend_workers=frontend_workers) as server,
        grpc.insecure_channel(server.grpc_url) as channel,
    ):
        stub = pbg.GRPCInferenceServiceStub(channel)
        received = []
        with pytest.raises(grpc.RpcError) as ended:
            for response in stub.ModelStreamInfer(iter(requests), metadata=(("triton_grpc_error", "true"),)):
                received.append(response)
        assert ended.value.code() == grpc.StatusCode.INTERNAL
        assert "negative" in ended.value.details()
        assert [r.infer_response.id for r in received] == ["failing1", "nope1"]
        assert received[0].error_message == ""
        assert received[1].error_message == "Request for unknown model: 'nope' is not found"
        # without the header the same error is answered in-band and the stream goes on
        answered = list(stub.ModelStreamInfer(iter(requests)))
        assert [bool(r.error_message) for r in answered] == [False, True, True, False]
