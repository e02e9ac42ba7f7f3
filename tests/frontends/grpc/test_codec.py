"""``naiad.codecs.grpc_v2`` on its own: the hand-walked wire format, typed contents, response framing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from naiad.codecs import grpc_v2
from naiad.core.errors import InvalidArgumentError
from naiad.core.request import InferResponse, Tensor
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


@pytest.mark.parametrize(
    ("text", "version"), [("", ""), ("1", "1"), ("01", "1"), (" 2", "2"), ("+3", "3"), ("4x", "4")]
)
def test_versions_read_like_triton(text: str, version: str) -> None:
    assert grpc_v2.model_version(text) == version


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
        "m", "1", "id",
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
