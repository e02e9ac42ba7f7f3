"""KServe v2 gRPC messages (``inference.GRPCInferenceService``) <-> core requests and responses.

Tensor bytes dominate large requests, so they never go through the protobuf runtime: the top level of a
large ``ModelInferRequest`` is walked by hand, ``raw_input_contents`` become memoryviews of the received
message (and then zero-copy ``np.frombuffer`` views), and only the small rest is parsed by protobuf.
Small requests are parsed whole: copying a few tensor bytes costs less than walking fields in Python.
Responses are built the same way in reverse: protobuf serializes the metadata and each output tensor is
appended as a ``raw_output_contents`` field straight from its array, so a tensor is copied once, into
the outgoing message.

Every size a client declares (shapes, typed element counts, BYTES length prefixes) is checked against
what was received before anything is allocated.  Messages are Triton's where clients may match on them.
This module knows protobuf messages only, never the grpc transport.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError, Message
from tritonclient.grpc import service_pb2 as pb

from naiad.codecs import bytes_tensor, shared_memory
from naiad.codecs.classification import PARAMETER as CLASSIFICATION
from naiad.codecs.classification import class_count
from naiad.codecs.version import model_version
from naiad.codecs.wire import wire_data, wire_size
from naiad.core import datatypes
from naiad.core.errors import InvalidArgumentError, RankError, check_string_correlation_id, request_prefix
from naiad.core.request import (
    InferRequest,
    InferResponse,
    Parameters,
    ParameterValue,
    PlainRequest,
    PlainResponse,
    RequestedOutput,
    Tensor,
    WireTensor,
)
from naiad.core.shm import SharedMemoryRegistry

_INT64_MAX = 2**63 - 1
_UINT64 = 2**64 - 1
_PARSE_ERROR = "Unable to parse request"
#: ``triton_`` request parameters Triton accepts (and which it parses itself).
_TRITON_PARAMETERS = ("triton_enable_empty_final_response",)
#: The registry of a caller that names none: no region can be found in it.
_NO_REGIONS = SharedMemoryRegistry(enabled=False)

_WIRE_VARINT, _WIRE_FIXED64, _WIRE_LEN, _WIRE_FIXED32 = 0, 1, 2, 5
_RAW_INPUT_FIELD = pb.ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number
_RAW_OUTPUT_FIELD = pb.ModelInferResponse.DESCRIPTOR.fields_by_name["raw_output_contents"].number
_STREAM_RESPONSE_FIELD = pb.ModelStreamInferResponse.DESCRIPTOR.fields_by_name["infer_response"].number
#: Requests up to this size are parsed whole by protobuf; larger ones keep their tensors in place.
_SPLIT_ABOVE = 64 * 1024

#: Typed ``contents`` fields in the order Triton checks them, with the datatype each one carries.
_CONTENTS_TYPE = {
    "bool_contents": "BOOL",
    "int_contents": "INT32",
    "int64_contents": "INT64",
    "uint_contents": "UINT32",
    "uint64_contents": "UINT64",
    "fp32_contents": "FP32",
    "fp64_contents": "FP64",
    "bytes_contents": "BYTES",
}
#: The 32-bit typed fields also carry the 8- and 16-bit integer types.
_NARROW = {"int_contents": ("INT8", "INT16"), "uint_contents": ("UINT8", "UINT16")}
#: Typed field -> the numpy dtype of its elements on the wire.
_CONTENTS_DTYPE = {
    "bool_contents": np.dtype(np.bool_),
    "int_contents": np.dtype(np.int32),
    "int64_contents": np.dtype(np.int64),
    "uint_contents": np.dtype(np.uint32),
    "uint64_contents": np.dtype(np.uint64),
    "fp32_contents": np.dtype(np.float32),
    "fp64_contents": np.dtype(np.float64),
}
#: Datatype -> the typed field that may carry it (FP16 and BF16 travel raw only).
_CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def _key(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_RAW_OUTPUT_KEY = _key(_RAW_OUTPUT_FIELD, _WIRE_LEN)
_SMALL_VARINTS = [bytes((value,)) for value in range(128)]
_STREAM_RESPONSE_KEY = _key(_STREAM_RESPONSE_FIELD, _WIRE_LEN)


# ---- request ---------------------------------------------------------------------------------------


_Input = pb.ModelInferRequest.InferInputTensor
_Output = pb.ModelInferRequest.InferRequestedOutputTensor


@dataclass(slots=True)
class ParsedInferRequest:
    """A ``ModelInferRequest`` whose ``raw_input_contents`` stayed in the received buffer."""

    message: pb.ModelInferRequest  # without raw_input_contents
    raw: list[memoryview]


def parse(message_type: type[Message], data: bytes | memoryview) -> Any:
    """A request message from its wire bytes; malformed bytes are the client's error."""
    try:
        return message_type.FromString(data)  # type: ignore[arg-type]  # upb reads any buffer
    except DecodeError:
        raise InvalidArgumentError(_PARSE_ERROR) from None


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise InvalidArgumentError(_PARSE_ERROR)
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def parse_infer_request(data: bytes) -> ParsedInferRequest:
    """Split off ``raw_input_contents`` without copying, and parse the rest with protobuf.

    A message of at most :data:`_SPLIT_ABOVE` bytes is parsed whole (its tensors are copied).
    """
    size = len(data)
    raw: list[memoryview]
    if size <= _SPLIT_ABOVE:
        message = parse(pb.ModelInferRequest, data)
        raw = [memoryview(contents) for contents in message.raw_input_contents]
        if raw:
            message.ClearField("raw_input_contents")
        return ParsedInferRequest(message, raw)
    view = memoryview(data)
    raw = []
    kept: list[memoryview] = []
    kept_from = pos = 0
    while pos < size:
        start = pos
        key, pos = _read_varint(data, pos)
        wire_type = key & 7
        if wire_type == _WIRE_LEN:
            length, pos = _read_varint(data, pos)
            end = pos + length
            if end > size:
                raise InvalidArgumentError(_PARSE_ERROR)
            if key >> 3 == _RAW_INPUT_FIELD:
                raw.append(view[pos:end])
                if start > kept_from:
                    kept.append(view[kept_from:start])
                kept_from = end
            pos = end
        elif wire_type == _WIRE_VARINT:
            pos = _read_varint(data, pos)[1]
        elif wire_type == _WIRE_FIXED64:
            pos += 8
        elif wire_type == _WIRE_FIXED32:
            pos += 4
        else:
            raise InvalidArgumentError(_PARSE_ERROR)
    if pos > size:
        raise InvalidArgumentError(_PARSE_ERROR)
    if not raw:
        return ParsedInferRequest(parse(pb.ModelInferRequest, data), raw)
    if kept_from < size:
        kept.append(view[kept_from:size])
    header = kept[0] if len(kept) == 1 else b"".join(kept)
    return ParsedInferRequest(parse(pb.ModelInferRequest, header), raw)


def to_infer_request(
    parsed: ParsedInferRequest, headers: dict[str, str], regions: SharedMemoryRegistry | None = None
) -> InferRequest:
    """The core request, in Triton's checking order: parameters, then inputs, then outputs.

    ``regions`` holds the shared memory regions inputs and outputs may name (none when omitted).
    """
    regions = regions if regions is not None else _NO_REGIONS
    message = parsed.message
    request = InferRequest(
        model_name=message.model_name,
        model_version=model_version(message.model_version),
        id=message.id,
        headers=headers,
    )
    if message.parameters:
        for key, value in message.parameters.items():
            _request_parameter(request, key, value)
    raw = parsed.raw
    used = 0
    refusals: list[tuple[str, InvalidArgumentError]] = []  # (see ``bytes_tensor.refused_first``)
    for item in message.inputs[:]:  # (a list: protobuf's container costs twice as much to iterate)
        parameters = _tensor_parameters(item.parameters) if item.parameters else {}
        where = shared_memory.placement(item.name, parameters) if parameters else None
        if where is not None:
            datatype, shape = _datatype(item, request), _shape(item, request)[0]
            try:
                data = shared_memory.read_input(regions, where, item.name, datatype, shape, request)
            except InvalidArgumentError as error:
                refusals.append((item.name, error))
                continue
            parameters = shared_memory.without_placement(parameters)
            request.inputs.append(Tensor(item.name, datatype, data, parameters))
            continue
        if item.HasField("contents"):
            if raw:
                raise InvalidArgumentError(
                    f"contents field must not be specified when using raw_input_contents for "
                    f"'{item.name}' for model '{request.model_name}'"
                )
            try:
                data = _from_contents(item, request)
            except InvalidArgumentError as error:
                refusals.append((item.name, error))
                continue
        elif used < len(raw):
            used += 1
            try:
                data = _from_raw(item, raw[used - 1], request)
            except InvalidArgumentError as error:
                refusals.append((item.name, error))
                continue
        else:
            raise InvalidArgumentError(
                f"unable to find data for input tensor '{item.name}' for model '{request.model_name}' "
                "in request."
            )
        request.inputs.append(Tensor(item.name, item.datatype, data, parameters))
    if refusals:
        raise bytes_tensor.refused_first(refusals, [item.name for item in message.inputs])
    if used < len(raw):
        raise InvalidArgumentError(
            f"unexpected additional raw_input_contents for model '{request.model_name}': {len(raw)} "
            f"entries for {used} inputs"
        )
    if message.outputs:
        request.outputs = [_requested_output(item, regions) for item in message.outputs[:]]
    return request


def plain_request(parsed: ParsedInferRequest) -> PlainRequest | None:
    """``parsed`` as a :class:`PlainRequest`, or ``None`` when it has anything a plain request has
    not (parameters, shared memory, typed ``contents``, BYTES) or anything :func:`to_infer_request`
    refuses (a size, shape or version it would answer with an error): such a request takes the
    general path, which answers it.  (Repeated fields are sliced into lists first: protobuf's
    containers cost twice as much to iterate.)"""
    message = parsed.message
    raw = parsed.raw
    items = message.inputs[:]
    if message.parameters or len(raw) != len(items):
        return None
    inputs = []
    for item, data in zip(items, raw, strict=False):  # (as many of each: checked above)
        datatype = item.datatype
        size = datatypes.ELEMENT_SIZE.get(datatype)
        if size is None or item.parameters or item.HasField("contents"):
            return None
        shape = tuple(item.shape[:])
        if (
            len(shape) > RankError.MAX_RANK
            or (shape and min(shape) < 0)
            or size * math.prod(shape) != len(data)
            or datatypes.empty_but_too_large(shape, datatype)
        ):
            return None
        inputs.append(WireTensor(item.name, datatype, shape, data))
    outputs = None
    if message.outputs:
        outputs = []
        for output in message.outputs[:]:
            if output.parameters:
                return None
            outputs.append(RequestedOutput(output.name))
    try:
        version = model_version(message.model_version)
    except InvalidArgumentError:
        return None
    return PlainRequest(message.model_name, version, message.id, inputs, outputs)


def _prefix(request: InferRequest) -> str:
    return request_prefix(request.id)


def _value(parameter: pb.InferParameter) -> ParameterValue | None:
    """The value of an ``InferParameter`` (None when no member of its oneof is set)."""
    kind = parameter.WhichOneof("parameter_choice")
    return None if kind is None else getattr(parameter, kind)


def _request_parameter(request: InferRequest, key: str, parameter: pb.InferParameter) -> None:
    """Apply one request parameter with Triton's gRPC rules (which differ from its HTTP ones)."""
    kind = parameter.WhichOneof("parameter_choice")
    if key == "sequence_id":
        if kind not in ("int64_param", "string_param"):
            raise _type_error(key, "int64_param or string_param")
        value = getattr(parameter, kind)
        if isinstance(value, int):
            request.sequence_id = value & _UINT64
        else:
            request.sequence_id = check_string_correlation_id(value)
    elif key in ("sequence_start", "sequence_end"):
        if kind != "bool_param":
            raise _type_error(key, "bool_param")
        setattr(request, key, parameter.bool_param)
    elif key == "priority":
        if kind == "int64_param":
            if parameter.int64_param < 0:
                raise InvalidArgumentError("invalid value for 'priority', expected value >= 0.")
            request.priority = parameter.int64_param
        elif kind == "uint64_param":
            request.priority = parameter.uint64_param
        else:
            raise _type_error(key, "int64_param or uint64_param")
    elif key == "timeout":
        if kind != "int64_param":
            raise _type_error(key, "int64_param")
        request.timeout_us = parameter.int64_param & _UINT64
    elif key.startswith("triton_"):
        if key not in _TRITON_PARAMETERS:
            raise InvalidArgumentError(
                "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
                f"following keys starting with 'triton_' are allowed: {' '.join(_TRITON_PARAMETERS)}"
            )
        if kind != "bool_param":
            raise _type_error(key, "bool_param")
    elif kind in ("int64_param", "bool_param", "string_param", "double_param"):
        request.parameters[key] = getattr(parameter, kind)
    else:
        raise _type_error(key, "int64_param, bool_param, or string_param")


def _type_error(key: str, expected: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"invalid value type for '{key}' parameter, expected {expected}.")


def _tensor_parameters(parameters: Mapping[str, pb.InferParameter]) -> Parameters:
    result: Parameters = {}
    for key, parameter in parameters.items():
        value = _value(parameter)
        if value is not None:
            result[key] = value
    return result


def _shape(item: _Input, request: InferRequest) -> tuple[tuple[int, ...], int]:
    """The declared shape and element count; the count is only ever compared, never allocated."""
    shape = tuple(item.shape[:])
    if len(shape) > RankError.MAX_RANK:
        raise RankError(request.id, item.name, item.datatype, shape)
    if shape and min(shape) < 0:
        raise InvalidArgumentError(
            f"{_prefix(request)}All input dimensions should be specified for input '{item.name}' for "
            f"model '{request.model_name}', got [{','.join(str(d) for d in shape)}]"
        )
    datatypes.check_holdable(item.name, shape, item.datatype)
    return shape, math.prod(shape)


def _datatype(item: _Input, request: InferRequest) -> str:
    if not datatypes.is_valid(item.datatype):
        raise InvalidArgumentError(
            f"{_prefix(request)}invalid datatype '{item.datatype}' for input '{item.name}' of model "
            f"'{request.model_name}'"
        )
    return str(item.datatype)


def _size_mismatch(item: _Input, request: InferRequest, expected: int, got: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{_prefix(request)}input byte size mismatch for input '{item.name}' for model "
        f"'{request.model_name}'. Expected {expected}, got {got}"
    )


def _from_raw(item: _Input, raw: memoryview, request: InferRequest) -> np.ndarray[Any, Any]:
    datatype = _datatype(item, request)
    shape, count = _shape(item, request)
    if datatype == "BYTES":
        array = bytes_tensor.deserialize(raw, count, item.name, request.model_name, _prefix(request))
        return array.reshape(shape)
    expected = count * datatypes.ELEMENT_SIZE[datatype]
    if expected != len(raw):
        raise _size_mismatch(item, request, expected, len(raw))
    array = np.frombuffer(raw, dtype=datatypes.WIRE_DTYPE[datatype], count=count)
    return array if len(shape) == 1 else array.reshape(shape)  # a 1-D view needs no second array


def _from_contents(item: _Input, request: InferRequest) -> np.ndarray[Any, Any]:
    datatype = _datatype(item, request)
    shape, count = _shape(item, request)
    contents = item.contents
    field = ""
    for name, carried in _CONTENTS_TYPE.items():
        if not getattr(contents, name):
            continue
        if datatype in _NARROW.get(name, ()):
            carried = datatype
        if name != _CONTENTS_FIELD.get(datatype) or carried != datatype:
            raise InvalidArgumentError(
                f"unexpected explicit tensor data for input tensor '{item.name}' for model "
                f"'{request.model_name}' of type '{carried}', expected datatype '{datatype}'"
            )
        field = name
    values = getattr(contents, field) if field else ()
    if datatype == "BYTES":
        return _strings(item, request, values, count).reshape(shape)
    element = datatypes.ELEMENT_SIZE[datatype]
    if len(values) != count:
        raise _size_mismatch(item, request, count * element, len(values) * element)
    target = datatypes.NUMPY_DTYPE[datatype]
    array = np.fromiter(values, dtype=_CONTENTS_DTYPE.get(field, target), count=count)
    if array.dtype != target and count:
        info = datatypes.integer_range(target)
        if int(array.min()) < info.min or int(array.max()) > info.max:
            raise InvalidArgumentError(
                f"{_prefix(request)}a value of input '{item.name}' is out of range for {datatype}"
            )
    return array.astype(target, copy=False).reshape(shape)


def _strings(
    item: _Input, request: InferRequest, values: Sequence[bytes], count: int
) -> np.ndarray[Any, Any]:
    if len(values) < count:
        raise InvalidArgumentError(
            f"{_prefix(request)}expected {count} string elements for inference input '{item.name}' "
            f"for model '{request.model_name}', got {len(values)}"
        )
    if len(values) > count:
        raise InvalidArgumentError(
            f"{_prefix(request)}unexpected number of string elements {len(values)} for inference "
            f"input '{item.name}' for model '{request.model_name}', expecting {count}"
        )
    array = np.empty(count, dtype=np.object_)
    array[:] = list(values)
    return array


def _requested_output(item: _Output, regions: SharedMemoryRegistry) -> RequestedOutput:
    if not item.parameters:
        return RequestedOutput(item.name)
    if CLASSIFICATION in item.parameters:  # (Triton's gRPC words, not its HTTP ones; 0 asks for none)
        wanted = item.parameters[CLASSIFICATION]
        if wanted.WhichOneof("parameter_choice") != "int64_param":
            raise InvalidArgumentError(
                "invalid value type for 'classification' parameter, expected int64_param"
            )
        if wanted.int64_param <= 0:
            raise InvalidArgumentError("invalid value for 'classification' parameter, expected >= 0")
    parameters = _tensor_parameters(item.parameters)
    class_count(item.name, parameters)
    where = shared_memory.placement(item.name, parameters)
    if where is not None:
        shared_memory.check_output(regions, where)
    return RequestedOutput(item.name, parameters)


def shm_outputs(message: pb.ModelInferRequest) -> list[str]:
    """The outputs a ``ModelInferRequest`` asks to have written into shared memory."""
    return [
        item.name for item in message.outputs if item.parameters and shared_memory.REGION in item.parameters
    ]


def repository_parameters(parameters: Mapping[str, pb.ModelRepositoryParameter]) -> dict[str, Any]:
    """RepositoryModelLoad/Unload parameters as the data plane takes them (``bytes_param`` stays bytes:
    gRPC carries ``file:`` contents raw, where HTTP carries base64 text)."""
    values: dict[str, Any] = {}
    for key, parameter in parameters.items():
        kind = parameter.WhichOneof("parameter_choice")
        if kind is None:
            raise InvalidArgumentError(f"parameter '{key}' has no value")
        values[key] = getattr(parameter, kind)
    return values


# ---- response --------------------------------------------------------------------------------------


def _set_parameters(target: MutableMapping[str, pb.InferParameter], parameters: Parameters) -> None:
    for key, value in parameters.items():
        parameter = target[key]
        if isinstance(value, bool):
            parameter.bool_param = value
        elif isinstance(value, int):
            if value > _INT64_MAX:
                parameter.uint64_param = value
            else:
                parameter.int64_param = value
        elif isinstance(value, float):
            parameter.double_param = value
        else:
            parameter.string_param = str(value)


def _response_head(
    model_name: str, model_version: str, request_id: str, parameters: Parameters, final: bool | None
) -> pb.ModelInferResponse:
    message = pb.ModelInferResponse(model_name=model_name, model_version=model_version, id=request_id)
    if parameters:
        _set_parameters(message.parameters, parameters)
    if final is not None:
        message.parameters["triton_final_response"].bool_param = final
    return message


def _raw_key(length: int) -> bytes:
    """The key and length of a ``raw_output_contents`` field of ``length`` bytes."""
    return _RAW_OUTPUT_KEY + (_SMALL_VARINTS[length] if length < 128 else _varint(length))


def _response_parts(
    response: InferResponse, final: bool | None, in_shm: Collection[str]
) -> tuple[list[Any], int]:
    """A ``ModelInferResponse`` as parts to join (metadata first, then one raw field per output).

    An output written to shared memory (named in ``in_shm``) gets an empty raw field, as in Triton,
    so the client's output indices still line up.
    """
    message = _response_head(
        response.model_name, response.model_version, response.id, response.parameters, final
    )
    parts: list[Any] = [b""]
    size = 0
    for tensor in response.outputs:
        output = message.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.data.shape)
        if tensor.parameters:
            _set_parameters(output.parameters, tensor.parameters)
        data = b"" if in_shm and tensor.name in in_shm else wire_data(tensor)
        length = wire_size(data)
        key = _raw_key(length)
        parts += (key, data)
        size += len(key) + length
    parts[0] = message.SerializeToString()
    return parts, size + len(parts[0])


def encode_plain_response(response: PlainResponse) -> bytes:
    """A ``ModelInferResponse`` for a :class:`PlainResponse`: the same bytes
    :func:`encode_infer_response` makes of the same response as arrays."""
    message = _response_head(
        response.model_name, response.model_version, response.id, response.parameters, None
    )
    add = message.outputs.add
    parts: list[Any] = [b""]
    for tensor in response.outputs:
        output = add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if tensor.parameters:
            _set_parameters(output.parameters, tensor.parameters)
        parts += (_raw_key(len(tensor.data)), tensor.data)
    parts[0] = message.SerializeToString()
    return b"".join(parts)


def encode_infer_response(response: InferResponse, in_shm: Collection[str] = ()) -> bytes:
    """A ``ModelInferResponse``, outputs always in ``raw_output_contents`` (all tritonclient reads)."""
    return b"".join(_response_parts(response, None, in_shm)[0])


def encode_stream_response(
    response: InferResponse, final: bool = True, in_shm: Collection[str] = ()
) -> bytes:
    """A ``ModelStreamInferResponse`` carrying ``response`` and its ``triton_final_response`` flag."""
    parts, size = _response_parts(response, final, in_shm)
    return b"".join([_STREAM_RESPONSE_KEY, _varint(size), *parts])


def encode_stream_error(message: str, request_id: str) -> bytes:
    """A ``ModelStreamInferResponse`` reporting one failed request; the stream goes on."""
    encoded: bytes = pb.ModelStreamInferResponse(
        error_message=message, infer_response=pb.ModelInferResponse(id=request_id)
    ).SerializeToString()
    return encoded
