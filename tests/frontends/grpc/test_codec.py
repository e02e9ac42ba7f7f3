"""``naiad.codecs.grpc_v2`` on its own: the hand-walked wire format, typed contents, response framing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from naiad.codecs import bytes_tensor, grpc_v2
from naiad.core.errors import InvalidArgumentError
from naiad.core.request import InferResponse, PlainResponse, Tensor, WireTensor
from tritonclient.grpc import service_pb2 as pb


def _request(**raw: bytes) -> Any:
    request = pb.ModelInferRequest(model_name="m", id="i")
    for name, data in raw.items():
        request.inputs.add(name=name, datatype="UINT8", shape=[len(data)])
        request.raw_input_contents.append(data)
    return request


def test_raw_contents_of_large_messages_stay_views_of_the_received_message() -> None:
    big = bytes(range(256)) * 300
    data = _request(A=big, B=b"").SerializeToString()
    parsed = grpc_v2.parse_infer_request(data)
    assert [bytes(view) for view in parsed.raw] == [big, b""]
    assert all(view.obj is data for view in parsed.raw)
    assert not parsed.message.raw_input_contents
    core = grpc_v2.to_infer_request(parsed, {"x-header": "v"})
    assert core.inputs[0].data.tobytes() == big
    assert not core.inputs[0].data.flags.writeable


def test_small_messages_parse_whole() -> None:
    data = _request(A=b"abc", B=b"").SerializeToString()
    parsed = grpc_v2.parse_infer_request(data)
    assert [bytes(view) for view in parsed.raw] == [b"abc", b""]
    assert not parsed.message.raw_input_contents
    core = grpc_v2.to_infer_request(parsed, {"x-header": "v"})
    assert core.headers == {"x-header": "v"}
    assert core.inputs[0].data.base is not None
    assert not core.inputs[0].data.flags.writeable


def test_raw_fields_interleaved_with_others_parse_the_same() -> None:
    for pad in (b"", b"\x00" * 70_000):  # parsed whole, and walked by hand (the padding is A's)
        whole = _request(A=b"abc" + pad, B=b"de")
        raw = pb.ModelInferRequest(raw_input_contents=whole.raw_input_contents).SerializeToString()
        rest = pb.ModelInferRequest(model_name="m", id="i", inputs=whole.inputs).SerializeToString()
        cut = len(raw) - 4  # between A's field and B's
        parsed = grpc_v2.parse_infer_request(raw[:cut] + rest + raw[cut:])
        assert [bytes(v) for v in parsed.raw] == [b"abc" + pad, b"de"]
        assert (parsed.message.model_name, parsed.message.id, len(parsed.message.inputs)) == ("m", "i", 2)


@pytest.mark.parametrize(
    "data",
    [b"\x3a", b"\x3a\x05ab", b"\x3a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x0b", b"\x0a\x03m"],
)
def test_truncated_or_malformed_messages_are_invalid(data: bytes) -> None:
    with pytest.raises(InvalidArgumentError, match="Unable to parse request"):
        grpc_v2.parse_infer_request(data)



@pytest.mark.parametrize("text", ["x", "-1", "99999999999999999999"])
def test_bad_versions_are_invalid(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="version should be an integral value > 0"):
        grpc_v2.model_version(text)


def test_narrow_integers_from_wide_typed_fields() -> None:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="A", datatype="INT16", shape=[2]).contents.int_contents.extend([-32768, 32767])
    request.inputs.add(name="B", datatype="UINT8", shape=[2]).contents.uint_contents.extend([0, 255])
    request.inputs.add(name="C", datatype="UINT64", shape=[1]).contents.uint64_contents.append(2**64 - 1)
    core = grpc_v2.to_infer_request(grpc_v2.parse_infer_request(request.SerializeToString()), {})
    assert [t.data.dtype for t in core.inputs] == [np.int16, np.uint8, np.uint64]
    assert core.inputs[2].data[0] == 2**64 - 1
    request.inputs[1].contents.uint_contents.append(256)
    request.inputs[1].shape[:] = [3]
    with pytest.raises(InvalidArgumentError, match="out of range for UINT8"):
        grpc_v2.to_infer_request(grpc_v2.parse_infer_request(request.SerializeToString()), {})


def test_bf16_travels_raw_untouched() -> None:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="A", datatype="BF16", shape=[2])
    request.raw_input_contents.append(b"\x80\x3f\x00\x40")
    core = grpc_v2.to_infer_request(grpc_v2.parse_infer_request(request.SerializeToString()), {})
    assert core.inputs[0].data.tobytes() == b"\x80\x3f\x00\x40"
    assert core.inputs[0].data.shape == (2,)


def test_responses_parse_back_with_protobuf() -> None:
    response = InferResponse(
        "m",
        "1",
        "id",
        [
            Tensor("A", "FP32", np.arange(6, dtype=np.float32).reshape(2, 3).T, {"p": 1}),
            Tensor("B", "BYTES", np.array([b"x", b""], dtype=np.object_)),
            Tensor("C", "INT64", np.arange(3)[::2].astype(">i8")),
        ],
        {"flag": True, "ratio": 0.5, "big": 2**64 - 1, "text": "t"},
    )
    message = pb.ModelInferResponse.FromString(grpc_v2.encode_infer_response(response))
    assert (message.model_name, message.model_version, message.id) == ("m", "1", "id")
    assert [list(o.shape) for o in message.outputs] == [[3, 2], [2], [2]]
    assert message.raw_output_contents[0] == np.arange(6, dtype="<f4").reshape(2, 3).T.tobytes()
    assert message.raw_output_contents[1] == b"\x01\x00\x00\x00x\x00\x00\x00\x00"
    assert message.raw_output_contents[2] == np.array([0, 2], dtype="<i8").tobytes()
    assert message.outputs[0].parameters["p"].int64_param == 1
    params = message.parameters
    assert (params["flag"].bool_param, params["ratio"].double_param) == (True, 0.5)
    assert (params["big"].uint64_param, params["text"].string_param) == (2**64 - 1, "t")
    stream = pb.ModelStreamInferResponse.FromString(grpc_v2.encode_stream_response(response))
    assert stream.infer_response.parameters["triton_final_response"].bool_param is True
    assert stream.infer_response.raw_output_contents == message.raw_output_contents


def test_bytes_and_requests_with_options_are_not_plain() -> None:
    """What the general path must decode: BYTES, parameters (of the request, of an input: shared
    memory; of an output: classification), typed contents, and anything it refuses (a byte size that
    does not match the shape, a negative dimension, a version that is no number)."""
    x = np.arange(4, dtype=np.float32)
    ordinary = pb.ModelInferRequest(model_name="three_fp32", id="req-1")
    ordinary.inputs.add(name="X", datatype="FP32", shape=[4])
    ordinary.raw_input_contents.append(x.tobytes())
    ordinary.outputs.add(name="SAME")

    def variant(change: Any) -> grpc_v2.ParsedInferRequest:
        message = pb.ModelInferRequest()
        message.CopyFrom(ordinary)
        change(message)
        return grpc_v2.parse_infer_request(message.SerializeToString())

    plain = grpc_v2.plain_request(variant(lambda m: None))
    assert plain is not None
    assert (plain.model_name, plain.model_version, plain.id) == ("three_fp32", "", "req-1")
    assert [(t.name, t.datatype, t.shape, bytes(t.data)) for t in plain.inputs] == [
        ("X", "FP32", (4,), x.tobytes())
    ]
    assert plain.outputs is not None and [o.name for o in plain.outputs] == ["SAME"]
    assert grpc_v2.plain_request(variant(lambda m: setattr(m, "model_version", "01"))).model_version == "1"  # type: ignore[union-attr]

    def bytes_input(m: pb.ModelInferRequest) -> None:
        m.inputs[0].datatype = "BYTES"
        m.raw_input_contents[0] = b"\x01\x00\x00\x00a" * 4

    def size(m: pb.ModelInferRequest) -> None:
        m.raw_input_contents[0] = m.raw_input_contents[0][:-1]

    def contents(m: pb.ModelInferRequest) -> None:
        del m.raw_input_contents[:]
        m.inputs[0].contents.fp32_contents.extend([1.0, 2.0, 3.0, 4.0])

    not_plain = {
        "BYTES": bytes_input,
        "request parameter": lambda m: setattr(m.parameters["priority"], "int64_param", 1),
        "shared memory input": lambda m: setattr(
            m.inputs[0].parameters["shared_memory_region"], "string_param", "r"
        ),
        "classification": lambda m: setattr(m.outputs[0].parameters["classification"], "int64_param", 2),
        "byte size": size,
        "negative dimension": lambda m: m.inputs[0].shape.__setitem__(0, -4),
        "contents": contents,
        "version": lambda m: setattr(m, "model_version", "latest"),
    }
    for case, change in not_plain.items():
        assert grpc_v2.plain_request(variant(change)) is None, case


def test_a_plain_response_is_encoded_as_the_same_response_from_arrays() -> None:
    """``encode_plain_response`` and ``encode_infer_response`` give the same bytes for one answer,
    parameters and a BYTES output included."""
    floats = np.arange(6, dtype=np.float32).reshape(2, 3)
    words = np.array([b"a", b"bcd"], dtype=np.object_)
    arrays = InferResponse(
        "m",
        "2",
        "id-7",
        [Tensor("F", "FP32", floats, {"note": "x"}), Tensor("W", "BYTES", words)],
        {"count": 3, "flag": True, "ratio": 0.5},
    )
    wire = PlainResponse(
        "m",
        "2",
        "id-7",
        [
            WireTensor("F", "FP32", (2, 3), memoryview(floats.tobytes()), {"note": "x"}),
            WireTensor("W", "BYTES", (2,), bytes_tensor.serialize(words)),
        ],
        {"count": 3, "flag": True, "ratio": 0.5},
    )
    assert grpc_v2.encode_plain_response(wire) == grpc_v2.encode_infer_response(arrays)
