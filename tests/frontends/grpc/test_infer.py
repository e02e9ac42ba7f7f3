"""ModelInfer: every datatype through raw and typed contents, parameters, and errors with their codes.

tritonclient always sends ``raw_input_contents``; typed ``contents`` are sent with the generated stub.
Answers always come in ``raw_output_contents``, which is all tritonclient reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from tests.frontends.grpc.conftest import DATATYPES
from tests.support.server import ServerProcess

#: Typed ``contents`` field for each datatype (FP16 travels raw only).
_TYPED_FIELD = {
    "BOOL": "bool_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
    "UINT32": "uint_contents", "UINT64": "uint64_contents", "INT8": "int_contents",
    "INT16": "int_contents", "INT32": "int_contents", "INT64": "int64_contents",
    "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}


@pytest.fixture
def client(grpc_server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(grpc_server.grpc_url) as c:
        yield c


@pytest.fixture
def stub(grpc_server: ServerProcess) -> Iterator[pbg.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(grpc_server.grpc_url) as channel:
        yield pbg.GRPCInferenceServiceStub(channel)


def _sample(datatype: str) -> np.ndarray[Any, Any]:
    if datatype == "BYTES":
        return np.array([[b"a", b"", b"\x00\xffnul\x00"], [b"xyz", b"\x00", b"last"]], dtype=np.object_)
    if datatype == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    dtype = np.dtype(datatype.lower().replace("fp", "float"))
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.array([[info.min, 0, 1], [info.max, 7, 2]], dtype=dtype)
    return np.array([[1.5, -0.0, np.inf], [-2.25, 1e-3, 3]], dtype=dtype)


def _add_sub_inputs(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> list[grpcclient.InferInput]:
    inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"), grpcclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def _refusal(call: object, *args: object, **kwargs: object) -> tuple[str, str]:
    assert callable(call)
    with pytest.raises(InferenceServerException) as info:
        call(*args, **kwargs)
    return str(info.value.status()), str(info.value.message())


def _rpc_error(call: object, request: object) -> tuple[grpc.StatusCode, str]:
    assert callable(call)
    with pytest.raises(grpc.RpcError) as info:
        call(request)
    error = info.value
    return error.code(), error.details()  # type: ignore[attr-defined]


def test_add_sub_through_tritonclient(client: grpcclient.InferenceServerClient) -> None:
    a = np.arange(4, dtype=np.float32)
    b = np.full(4, 0.5, dtype=np.float32)
    result = client.infer("add_sub", _add_sub_inputs(a, b), request_id="req-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == ("add_sub", "1", "req-1")
    assert len(response.raw_output_contents) == 2


@pytest.mark.parametrize("model", ["add_sub", "sub_add"])
def test_outputs_come_in_the_order_the_model_made_them(
    client: grpcclient.InferenceServerClient, model: str
) -> None:
    """As Triton 2.51 answers (checked side by side): the order a Python model returned its outputs
    in, whether the request named them (in either order) or not; not the config's or the request's."""
    made = ["OUTPUT0", "OUTPUT1"] if model == "add_sub" else ["OUTPUT1", "OUTPUT0"]
    a, b = np.full(4, 3, dtype=np.float32), np.ones(4, dtype=np.float32)
    for names in (None, ["OUTPUT1", "OUTPUT0"], ["OUTPUT0", "OUTPUT1"]):
        outputs = None if names is None else [grpcclient.InferRequestedOutput(n) for n in names]
        result = client.infer(model, _add_sub_inputs(a, b), outputs=outputs)
        assert [o.name for o in result.get_response().outputs] == made
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    only = client.infer(model, _add_sub_inputs(a, b), outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in only.get_response().outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(only.as_numpy("OUTPUT1"), a - b)


@pytest.mark.parametrize("datatype", DATATYPES)
def test_every_datatype_round_trips_through_raw_contents(
    client: grpcclient.InferenceServerClient, datatype: str
) -> None:
    data = _sample(datatype)
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), datatype)
    tensor.set_data_from_numpy(data)
    result = client.infer(f"identity_{datatype.lower()}", [tensor])
    output = result.as_numpy("OUTPUT0")
    assert result.get_response().outputs[0].datatype == datatype
    assert output.shape == data.shape
    np.testing.assert_array_equal(output, data)


@pytest.mark.parametrize("datatype", [d for d in DATATYPES if d != "FP16"])
def test_every_datatype_is_accepted_in_typed_contents(
    client: grpcclient.InferenceServerClient, stub: pbg.GRPCInferenceServiceStub, datatype: str
) -> None:
    data = _sample(datatype)
    request = pb.ModelInferRequest(model_name=f"identity_{datatype.lower()}")
    tensor = request.inputs.add(name="INPUT0", datatype=datatype, shape=data.shape)
    getattr(tensor.contents, _TYPED_FIELD[datatype]).extend(data.reshape(-1).tolist())
    response = stub.ModelInfer(request)
    assert not response.outputs[0].HasField("contents")  # answers are always raw
    result = grpcclient.InferResult(response)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_an_empty_tensor_gets_an_empty_raw_output(client: grpcclient.InferenceServerClient) -> None:
    tensor = grpcclient.InferInput("INPUT0", [1, 0], "BYTES")
    tensor.set_data_from_numpy(np.empty((1, 0), dtype=np.object_))
    response = client.infer("identity_bytes", [tensor]).get_response()
    assert list(response.outputs[0].shape) == [1, 0]
    assert list(response.raw_output_contents) == [b""]


def test_unknown_model_is_not_found(client: grpcclient.InferenceServerClient) -> None:
    inputs = _add_sub_inputs(np.ones(4, np.float32), np.ones(4, np.float32))
    assert _refusal(client.infer, "nope", inputs) == (
        "StatusCode.NOT_FOUND", "Request for unknown model: 'nope' is not found"
    )
    assert _refusal(client.infer, "add_sub", inputs, model_version="3") == (
        "StatusCode.NOT_FOUND", "Request for unknown model: 'add_sub' version 3 is not found"
    )


def test_model_infer_refuses_a_decoupled_model(client: grpcclient.InferenceServerClient) -> None:
    tensor = grpcclient.InferInput("INPUT0", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
    assert _refusal(client.infer, "decoupled", [tensor]) == (
        "StatusCode.UNIMPLEMENTED", "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )


def test_wrong_datatype_and_shape_are_invalid(client: grpcclient.InferenceServerClient) -> None:
    wrong_type = [grpcclient.InferInput("INPUT0", [4], "INT32"), grpcclient.InferInput("INPUT1", [4], "FP32")]
    wrong_type[0].set_data_from_numpy(np.ones(4, dtype=np.int32))
    wrong_type[1].set_data_from_numpy(np.ones(4, dtype=np.float32))
    status, message = _refusal(client.infer, "add_sub", wrong_type, request_id="r7")
    assert status == "StatusCode.INVALID_ARGUMENT"
    assert message == (
        "[request id: r7] inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' expects 'FP32'"
    )
    wrong_shape = _add_sub_inputs(np.ones(4, np.float32), np.ones(4, np.float32))
    wrong_shape[1] = grpcclient.InferInput("INPUT1", [5], "FP32")
    wrong_shape[1].set_data_from_numpy(np.ones(5, dtype=np.float32))
    status, message = _refusal(client.infer, "add_sub", wrong_shape)
    assert status == "StatusCode.INVALID_ARGUMENT"
    assert "unexpected shape for input 'INPUT1' for model 'add_sub'. Expected [4], got [5]" in message


def test_an_output_asked_for_twice_is_invalid(client: grpcclient.InferenceServerClient) -> None:
    inputs = _add_sub_inputs(np.ones(4, np.float32), np.ones(4, np.float32))
    twice = [grpcclient.InferRequestedOutput("OUTPUT1"), grpcclient.InferRequestedOutput("OUTPUT1")]
    status, message = _refusal(client.infer, "add_sub", inputs, outputs=twice, request_id="r8")
    assert (status, message) == ("StatusCode.INVALID_ARGUMENT", "[request id: r8] output 'OUTPUT1' already exists in request")


def _add_sub_request(**fields: Any) -> Any:
    request = pb.ModelInferRequest(model_name="add_sub", **fields)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[4])
        request.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    return request


def test_raw_contents_must_match_the_declared_size(stub: pbg.GRPCInferenceServiceStub) -> None:
    short = _add_sub_request(id="s")
    short.raw_input_contents[1] = b"\0" * 12
    assert _rpc_error(stub.ModelInfer, short) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "[request id: s] input byte size mismatch for input 'INPUT1' for model 'add_sub'. Expected 16, got 12",
    )
    huge = _add_sub_request()
    huge.inputs[0].shape[:] = [2**40]
    code, message = _rpc_error(stub.ModelInfer, huge)
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert f"Expected {2**42}, got 16" in message
    missing = _add_sub_request()
    del missing.raw_input_contents[1]
    assert _rpc_error(stub.ModelInfer, missing) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "unable to find data for input tensor 'INPUT1' for model 'add_sub' in request.",
    )
    extra = _add_sub_request()
    extra.raw_input_contents.append(b"\0" * 16)
    assert _rpc_error(stub.ModelInfer, extra)[0] is grpc.StatusCode.INVALID_ARGUMENT


def test_of_several_inputs_refused_the_last_is_named(stub: pbg.GRPCInferenceServiceStub) -> None:
    """Triton's core checks the inputs' contents in its map's order, the reverse of the request's
    (checked against Triton 2.51); so does the list of those given when some are missing."""
    both = _add_sub_request(id="both")
    both.raw_input_contents[0] = b"\0" * 12
    both.raw_input_contents[1] = b"\0" * 8
    assert _rpc_error(stub.ModelInfer, both) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "[request id: both] input byte size mismatch for input 'INPUT1' for model 'add_sub'. Expected 16, got 8",
    )
    unknown = _add_sub_request()
    unknown.inputs[1].name = "INPUT9"  # (refused before its contents are looked at)
    code, message = _rpc_error(stub.ModelInfer, unknown)
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "INPUT9" in message


def test_lying_bytes_length_prefixes_are_invalid(stub: pbg.GRPCInferenceServiceStub) -> None:
    request = pb.ModelInferRequest(model_name="identity_bytes")
    request.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 2])
    request.raw_input_contents.append(np.uint32(2**31).tobytes() + b"ab")
    assert _rpc_error(stub.ModelInfer, request)[0] is grpc.StatusCode.INVALID_ARGUMENT
    request.inputs[0].shape[:] = [1, 2**40]
    assert _rpc_error(stub.ModelInfer, request)[0] is grpc.StatusCode.INVALID_ARGUMENT


def test_typed_contents_are_checked(stub: pbg.GRPCInferenceServiceStub) -> None:
    mixed = _add_sub_request()
    mixed.inputs[1].contents.fp32_contents.extend([1, 2, 3, 4])
    assert _rpc_error(stub.ModelInfer, mixed) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "contents field must not be specified when using raw_input_contents for 'INPUT1' for model 'add_sub'",
    )
    typed = pb.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        typed.inputs.add(name=name, datatype="FP32", shape=[4]).contents.fp32_contents.extend([1, 2, 3, 4])
    typed.inputs[1].contents.fp32_contents.append(5)
    assert _rpc_error(stub.ModelInfer, typed) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT1' for model 'add_sub'. "
        "Expected 16, got 20",
    )
    del typed.inputs[1].contents.fp32_contents[:]
    typed.inputs[1].contents.int_contents.extend([1, 2, 3, 4])
    assert _rpc_error(stub.ModelInfer, typed) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "unexpected explicit tensor data for input tensor 'INPUT1' for model 'add_sub' of type 'INT32', "
        "expected datatype 'FP32'",
    )
    narrow = pb.ModelInferRequest(model_name="identity_int8")
    narrow.inputs.add(name="INPUT0", datatype="INT8", shape=[1, 1]).contents.int_contents.append(300)
    assert _rpc_error(stub.ModelInfer, narrow)[0] is grpc.StatusCode.INVALID_ARGUMENT


def test_reserved_and_custom_parameters(stub: pbg.GRPCInferenceServiceStub) -> None:
    ok = _add_sub_request()
    ok.parameters["sequence_id"].string_param = "seq"
    ok.parameters["priority"].uint64_param = 1
    ok.parameters["timeout"].int64_param = 10**6
    ok.parameters["custom"].double_param = 0.5
    ok.parameters["triton_enable_empty_final_response"].bool_param = True
    assert stub.ModelInfer(ok).model_name == "add_sub"
    for key, field, value, message in [
        ("triton_x", "bool_param", True,
         "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys "
         "starting with 'triton_' are allowed: triton_enable_empty_final_response"),
        ("sequence_id", "bool_param", True,
         "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."),
        ("sequence_start", "int64_param", 1,
         "invalid value type for 'sequence_start' parameter, expected bool_param."),
        ("priority", "int64_param", -1, "invalid value for 'priority', expected value >= 0."),
        ("timeout", "string_param", "1", "invalid value type for 'timeout' parameter, expected int64_param."),
        ("custom", "uint64_param", 1,
         "invalid value type for 'custom' parameter, expected int64_param, bool_param, or string_param."),
    ]:
        request = _add_sub_request()
        setattr(request.parameters[key], field, value)
        assert _rpc_error(stub.ModelInfer, request) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_unregistered_shared_memory_tensors_are_refused(stub: pbg.GRPCInferenceServiceStub) -> None:
    request = _add_sub_request()
    request.inputs[0].parameters["shared_memory_region"].string_param = "region"
    assert _rpc_error(stub.ModelInfer, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for "
        "tensor 'INPUT0'",
    )
    request.inputs[0].parameters["shared_memory_byte_size"].int64_param = 16
    assert _rpc_error(stub.ModelInfer, request) == (
        grpc.StatusCode.NOT_FOUND, "Unable to find shared memory region: 'region'"
    )


def test_numpy_types_match_tritonclient_names() -> None:
    for datatype in DATATYPES:
        assert np_to_triton_dtype(_sample(datatype).dtype) == datatype


@pytest.mark.parametrize(
    ("value", "message"),
    [  # (Triton's gRPC words, checked against Triton 2.51; its HTTP frontend words them otherwise)
        (pb.InferParameter(string_param="2"), "invalid value type for 'classification' parameter, expected int64_param"),
        (pb.InferParameter(int64_param=-2), "invalid value for 'classification' parameter, expected >= 0"),
        (pb.InferParameter(int64_param=0), "invalid value for 'classification' parameter, expected >= 0"),
    ],
)
def test_a_classification_count_is_checked_in_tritons_grpc_words(
    stub: pbg.GRPCInferenceServiceStub, value: Any, message: str
) -> None:
    request = _add_sub_request()
    request.outputs.add(name="OUTPUT0").parameters["classification"].CopyFrom(value)
    assert _rpc_error(stub.ModelInfer, request) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_a_shape_of_no_elements_too_large_to_hold_is_invalid(stub: pbg.GRPCInferenceServiceStub) -> None:
    # (numpy multiplies the other dimensions before it sees the 0: refused as the client's fault; this
    # was a 500, found by the fuzz tests once they ran through frontend workers too)
    request = _add_sub_request()
    del request.inputs[0].shape[:]
    request.inputs[0].shape.extend([0, 2**31, 2**31])
    request.raw_input_contents[0] = b""
    assert _rpc_error(stub.ModelInfer, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid shape for input 'INPUT0': shape [0,2147483648,2147483648] has no elements, but its other "
        "dimensions exceed the maximum size of 9223372036854775807 bytes",
    )
