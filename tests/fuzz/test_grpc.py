"""Generated malformed gRPC inference requests (ModelInfer and ModelStreamInfer): each gets a client's
error code with a message (or succeeds), never INTERNAL/UNKNOWN, and the connection survives."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from tests.fuzz.conftest import examples
from tests.fuzz.tally import Tally
from tests.support.server import ServerProcess

_INFER = "/inference.GRPCInferenceService/ModelInfer"
_STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
DATATYPES = ["BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "UINT64", "FP16", "FP32", "FP64", "BF16",
             "BYTES", "", "int32", "FP8"]  # fmt: skip


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield channel


def _seed(model: str) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, id="fuzz")
    if model == "add_sub":
        for name in ("INPUT0", "INPUT1"):
            request.inputs.add(name=name, datatype="FP32", shape=[4])
            request.raw_input_contents.append(np.ones(4, dtype=np.float32).tobytes())
    elif model == "simple_identity":
        item = request.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 2])
        item.contents.bytes_contents.extend([b"x", b"y"])
    else:
        name = "IN" if model == "pipeline" else "INPUT0"
        request.inputs.add(name=name, datatype="INT32", shape=[1, 1])
        request.raw_input_contents.append(np.ones(1, dtype=np.int32).tobytes())
    return request


def _parameter(draw: st.DrawFn) -> pb.InferParameter:
    kind = draw(st.sampled_from(["bool_param", "int64_param", "string_param", "double_param", "uint64_param", None]))
    parameter = pb.InferParameter()
    if kind == "bool_param":
        parameter.bool_param = draw(st.booleans())
    elif kind == "int64_param":
        parameter.int64_param = draw(st.integers(-(2**63), 2**63 - 1))
    elif kind == "uint64_param":
        parameter.uint64_param = draw(st.integers(0, 2**64 - 1))
    elif kind == "double_param":
        parameter.double_param = draw(st.floats(allow_nan=True))
    elif kind == "string_param":
        parameter.string_param = draw(st.text(max_size=200))
    return parameter


@st.composite
def mutated_infer_requests(draw: st.DrawFn) -> bytes:
    """A good ModelInferRequest with 1-4 of its fields changed to something a client might send."""
    model = draw(st.sampled_from(["add_sub", "simple_identity", "batched_identity", "sequence", "pipeline", "nope", ""]))
    request = _seed(model)
    for _ in range(draw(st.integers(1, 4))):
        change = draw(
            st.sampled_from(
                ["shape", "datatype", "raw", "add_raw", "drop_raw", "contents", "name", "parameter",
                 "tensor_parameter", "output", "version", "add_input", "drop_input", "rank"]
            )
        )  # fmt: skip
        inputs = request.inputs
        item: Any = inputs[draw(st.integers(0, len(inputs) - 1))] if inputs else None
        if change == "shape" and item is not None:
            del item.shape[:]
            dims = st.integers(-(2**63), 2**63 - 1) | st.integers(-2, 5) | st.sampled_from([1, 1, 0, 2**31, 2**63 - 1])
            item.shape.extend(draw(st.lists(dims, max_size=80)))
        elif change == "rank" and item is not None and request.raw_input_contents:
            # a shape of any rank (past numpy's 64 too) whose one element the raw content does hold
            del item.shape[:]
            item.shape.extend([1] * draw(st.sampled_from([0, 1, 3, 63, 64, 65, 80])))
            index = min(list(inputs).index(item), len(request.raw_input_contents) - 1)
            request.raw_input_contents[index] = b"\x00" * (8 if item.datatype in ("INT64", "FP64", "UINT64") else 4)
        elif change == "datatype" and item is not None:
            item.datatype = draw(st.sampled_from(DATATYPES))
        elif change == "raw" and request.raw_input_contents:
            index = draw(st.integers(0, len(request.raw_input_contents) - 1))
            request.raw_input_contents[index] = draw(st.binary(max_size=64))
        elif change == "add_raw":
            request.raw_input_contents.append(draw(st.binary(max_size=32)))
        elif change == "drop_raw" and request.raw_input_contents:
            del request.raw_input_contents[-1]
        elif change == "contents" and item is not None:
            item.contents.int_contents.extend(draw(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=8)))
            if draw(st.booleans()):
                item.contents.bytes_contents.extend(draw(st.lists(st.binary(max_size=8), max_size=4)))
            if draw(st.booleans()):
                item.contents.fp32_contents.extend(draw(st.lists(st.floats(width=32), max_size=4)))
        elif change == "name" and item is not None:
            item.name = draw(st.text(max_size=10))
        elif change == "parameter":
            key = draw(
                st.sampled_from(["sequence_id", "sequence_start", "sequence_end", "priority", "timeout",
                                 "binary_data_output", "triton_enable_empty_final_response", "triton_x", "custom",
                                 "headers"])
            )  # fmt: skip
            request.parameters[key].CopyFrom(_parameter(draw))
        elif change == "tensor_parameter" and item is not None:
            key = draw(st.sampled_from(["shared_memory_region", "shared_memory_offset", "shared_memory_byte_size",
                                        "binary_data_size", "x"]))  # fmt: skip
            item.parameters[key].CopyFrom(_parameter(draw))
        elif change == "output":
            output = request.outputs.add(name=draw(st.sampled_from(["OUTPUT0", "OUTPUT1", "OUT", "", "nope"])))
            key = draw(st.sampled_from(["classification", "binary_data", "shared_memory_region", "x"]))
            output.parameters[key].CopyFrom(_parameter(draw))
        elif change == "version":
            request.model_version = draw(st.sampled_from(["1", "2", "-1", "0", "abc", "99999999999999999999", " 1"]))
        elif change == "add_input":
            request.inputs.add(
                name=draw(st.sampled_from(["INPUT0", "INPUT1", "IN", "X"])),
                datatype=draw(st.sampled_from(DATATYPES)),
                shape=draw(st.lists(st.integers(0, 4), max_size=3)),
            )
        elif change == "drop_input" and inputs:
            del inputs[-1]
    data = request.SerializeToString()
    if draw(st.integers(0, 9)) == 0:
        data = data[: draw(st.integers(0, len(data)))]
    return data


def _unary(channel: grpc.Channel, tally: Tally, method: str, data: bytes) -> None:
    call = channel.unary_unary(method)
    what = f"{method} {data[:200]!r}"
    try:
        call(data, timeout=30)
        tally.grpc(None, "", what)
    except grpc.RpcError as error:
        code = error.code()
        if code in (grpc.StatusCode.DEADLINE_EXCEEDED,) or (
            code == grpc.StatusCode.UNAVAILABLE and "connect" in (error.details() or "").lower()
        ):
            tally.crash(f"{what}: {code.name} {error.details()}")
            raise
        tally.grpc(code.name, error.details() or "", what)


FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@settings(FUZZ, max_examples=examples(300, 2500))
@given(data=mutated_infer_requests())
def test_mutated_model_infer(channel: grpc.Channel, tally: Tally, data: bytes) -> None:
    _unary(channel, tally, _INFER, data)


@settings(FUZZ, max_examples=examples(50, 500))
@given(data=st.binary(max_size=300))
def test_random_bytes_as_model_infer(channel: grpc.Channel, tally: Tally, data: bytes) -> None:
    _unary(channel, tally, _INFER, data)


@settings(FUZZ, max_examples=examples(40, 400))
@given(messages=st.lists(mutated_infer_requests() | st.binary(max_size=64), min_size=1, max_size=4))
def test_mutated_stream_requests(channel: grpc.Channel, tally: Tally, messages: list[bytes]) -> None:
    """A stream of bad requests: each gets an in-band error message or a response; the stream ends
    normally (OK), or with a client's error code for bytes that are no message at all."""
    call = channel.stream_stream(_STREAM)
    what = f"stream {[m[:60] for m in messages]!r}"
    try:
        answers = list(call(iter(messages), timeout=30))
    except grpc.RpcError as error:
        code = error.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            tally.crash(f"{what}: {code.name}")
            raise
        tally.grpc(code.name, error.details() or "", what)
        return
    for answer in answers:
        message = pb.ModelStreamInferResponse.FromString(answer).error_message
        if message.lower().startswith("internal error"):  # what the servicer says of an unhandled error
            tally.grpc("INTERNAL", message, what)
    tally.grpc(None, "", what)
