"""KServe v2 JSON bodies with Triton's binary tensor extension <-> core requests and responses.

A body is a JSON header optionally followed by raw tensor bytes (``Inference-Header-Content-Length``
says where the JSON ends).  Binary inputs become zero-copy ``np.frombuffer`` views of the body.

Every size a client declares (shapes, ``binary_data_size``, BYTES length prefixes) is checked against
the bytes actually received before anything is allocated, so a lying or huge declaration costs an
error message, not memory.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import orjson

from naiad.codecs import bytes_tensor, shared_memory
from naiad.codecs.classification import class_count
from naiad.codecs.wire import wire_data, wire_size
from naiad.core import datatypes
from naiad.core.atoi import stoi
from naiad.core.errors import InvalidArgumentError, RankError, check_string_correlation_id, request_prefix
from naiad.core.request import (
    RESERVED_PARAMETERS,
    InferRequest,
    InferResponse,
    Parameters,
    RequestedOutput,
    Tensor,
)
from naiad.core.shm import SharedMemoryRegistry
from naiad.core.signature import ModelSignature

_MAX_DIM = 2**63 - 1
_INT_KINDS = frozenset("iu")
#: The registry of a caller that names none: no region can be found in it.
_NO_REGIONS = SharedMemoryRegistry(enabled=False)


def split_body(body: bytes, header_length: str | None) -> tuple[bytes | memoryview, memoryview]:
    """Split a body into its JSON header and binary section, checking the declared header length."""
    if header_length is None:
        return body, memoryview(b"")
    given = header_length[:64]
    try:
        length = stoi(header_length)  # (as Triton reads it: "12abc" is 12)
    except ValueError:
        raise InvalidArgumentError(f"Unable to parse Inference-Header-Content-Length, got: {given}") from None
    if not -(2**31) <= length < 2**31:
        raise InvalidArgumentError(
            "Unable to parse Inference-Header-Content-Length, value is out of range "
            f"[ {-(2**31)}, {2**31 - 1} ], got: {given}"
        )
    if length < 0 or length > len(body):
        raise InvalidArgumentError(f"inference header size should be in range (0, {len(body)}), got: {given}")
    view = memoryview(body)
    return view[:length], view[length:]


def decode_raw_request(
    body: bytes, signature: ModelSignature, model_name: str, model_version: str
) -> InferRequest:
    """Triton's raw binary request (``Inference-Header-Content-Length: 0``): the whole body is the
    model's only input, batch 1, and every output is returned binary.

    The shape is deduced from the body size, which only works when the input has at most one
    variable dimension (BYTES: a single element).
    """
    if len(signature.inputs) != 1:
        raise InvalidArgumentError(
            f"Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(signature.inputs)} inputs in '{model_name}' model configuration"
        )
    spec = signature.inputs[0]
    batch = (1,) if signature.max_batch_size > 0 else ()
    variable = [i for i, d in enumerate(spec.dims) if d == -1]
    if len(variable) > 1:
        raise InvalidArgumentError(
            f"The shape of the raw input '{spec.name}' can not be deduced because there are more than one "
            "variable-sized dimension"
        )
    if spec.datatype == "BYTES":
        dims = tuple(spec.dims)
        if variable or math.prod(dims) != 1:
            raise InvalidArgumentError(
                f"For BYTE datatype raw input '{spec.name}', the model must have input shape [1]"
            )
        array = np.empty(1, dtype=np.object_)
        array[0] = bytes(body)
        return InferRequest(
            model_name, model_version, inputs=[Tensor(spec.name, "BYTES", array.reshape(batch + dims))]
        )
    size = datatypes.ELEMENT_SIZE[spec.datatype]
    fixed = math.prod(d for d in spec.dims if d != -1)
    if len(body) % size or (len(body) // size) % max(fixed, 1):
        raise InvalidArgumentError(
            f"Raw request for input '{spec.name}' of shape {list(spec.dims)} cannot be deduced from "
            f"{len(body)} bytes of {spec.datatype}"
        )
    count = len(body) // size
    dims = tuple(count // max(fixed, 1) if d == -1 else d for d in spec.dims)
    if math.prod(dims) != count:
        raise InvalidArgumentError(
            f"unexpected size {len(body)} bytes for input '{spec.name}' of shape {list(spec.dims)}"
        )
    array = np.frombuffer(body, dtype=datatypes.WIRE_DTYPE[spec.datatype], count=count).reshape(batch + dims)
    return InferRequest(model_name, model_version, inputs=[Tensor(spec.name, spec.datatype, array)])


def _load_json(header: bytes | memoryview) -> dict[str, Any]:
    try:
        document = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        document = _with_non_finite(bytes(header))
        if document is None:
            raise InvalidArgumentError(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidArgumentError("failed to parse the request JSON buffer: expected a JSON object")
    return document


def _with_non_finite(text: bytes) -> Any:
    """A body that is JSON but for ``NaN``, ``Infinity`` and ``-Infinity`` (which Triton's parser
    takes as numbers, and Python clients write: ``json.dumps`` of a NaN, tritonclient's JSON inputs),
    parsed with them as floats; ``None`` for any other body orjson refused."""
    if b"NaN" not in text and b"Infinity" not in text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # (not JSON after all, or nested past the recursion limit)
        return None


def non_finite_json(flat: np.ndarray[Any, Any], written: Any = None) -> Any:
    """A flat float array as Triton writes it, ``NaN``, ``Infinity`` and ``-Infinity`` included (a
    client's ``json.loads`` reads them back; orjson alone writes ``null`` for each): ``written`` (what
    is serialized: ``flat`` itself unless given, e.g. as a list) when every value is finite, the common
    case, found with one vectorized test; else orjson's text of it with those values put back."""
    written = flat if written is None else written
    if flat.dtype.kind != "f" or bool(np.isfinite(flat).all()):
        return written
    text = orjson.dumps(written, option=orjson.OPT_SERIALIZE_NUMPY)  # a non-finite value is "null" there
    values = flat[~np.isfinite(flat)].tolist()
    tokens = iter([b"NaN" if math.isnan(v) else b"Infinity" if v > 0 else b"-Infinity" for v in values])
    return orjson.Fragment(_NULL.sub(lambda _: next(tokens), text))


_NULL = re.compile(rb"null")


def _parameters(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidArgumentError(f"Unable to parse 'parameters' of {where}: expected a JSON object")
    return raw


def _custom_parameter(key: str, value: Any) -> bool | int | float | str:
    if isinstance(value, (bool, int, float, str)):
        return value
    raise InvalidArgumentError(
        f"parameter '{key}' has a value of unsupported type: expected bool, number or string"
    )


def decode_request(
    header: bytes | memoryview,
    binary: memoryview,
    model_name: str,
    model_version: str,
    regions: SharedMemoryRegistry | None = None,
) -> tuple[InferRequest, bool]:
    """Decode a request body.  Returns the request and the request-level ``binary_data_output``.

    ``regions`` holds the shared memory regions inputs and outputs may name (none when omitted).
    """
    regions = regions if regions is not None else _NO_REGIONS
    document = _load_json(header)
    request = InferRequest(model_name=model_name, model_version=model_version)
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgumentError("Unable to parse 'id': expected a string")
    request.id = request_id
    binary_output = False
    for key, value in _parameters(document.get("parameters"), "the request").items():
        if key.startswith("triton_"):
            raise InvalidArgumentError(
                "parameter keys starting with 'triton_' are reserved for Triton usage and should "
                "not be specified."
            )
        if key in RESERVED_PARAMETERS:
            binary_output = _reserved_parameter(request, key, value) or binary_output
        else:
            request.parameters[key] = _custom_parameter(key, value)

    inputs = document.get("inputs")
    if not isinstance(inputs, list):
        raise InvalidArgumentError("Unable to parse 'inputs': expected an array")
    offset = 0
    refusals: list[tuple[str, InvalidArgumentError]] = []  # (see ``bytes_tensor.refused_first``)
    for item in inputs:
        tensor, offset = _decode_input(item, binary, offset, request, regions)
        if isinstance(tensor, InvalidArgumentError):
            refusals.append((item["name"], tensor))
        else:
            request.inputs.append(tensor)
    if refusals:
        raise bytes_tensor.refused_first(refusals, [item["name"] for item in inputs])
    if offset != len(binary):
        raise InvalidArgumentError(
            f"unexpected additional input data for model '{model_name}': {len(binary) - offset} "
            "bytes after the last binary input"
        )

    outputs = document.get("outputs")
    if outputs is not None:
        if not isinstance(outputs, list):
            raise InvalidArgumentError("Unable to parse 'outputs': expected an array")
        request.outputs = []
        for item in outputs:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise InvalidArgumentError("Unable to parse 'outputs': each needs a string 'name'")
            params = _parameters(item.get("parameters"), f"output '{item['name']}'")
            request.outputs.append(
                RequestedOutput(item["name"], _output_parameters(item["name"], params, regions))
            )
    return request, binary_output


def _reserved_parameter(request: InferRequest, key: str, value: Any) -> bool:
    """Apply one of Triton's reserved parameters; returns True for ``binary_data_output: true``."""
    if key == "binary_data_output":
        if not isinstance(value, bool):
            raise InvalidArgumentError("Unable to parse 'binary_data_output': expected a boolean")
        return value
    if key in ("sequence_start", "sequence_end"):
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"Unable to parse '{key}': expected a boolean")
        setattr(request, key, value)
    elif key == "sequence_id":
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, str))
            or (isinstance(value, int) and not 0 <= value < 2**64)
        ):
            raise InvalidArgumentError(
                "Unable to parse 'sequence_id': expected an unsigned integer or a string"
            )
        request.sequence_id = check_string_correlation_id(value) if isinstance(value, str) else value
    elif key == "priority":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
            raise InvalidArgumentError("Unable to parse 'priority': expected an unsigned integer")
        request.priority = value
    elif key == "timeout":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
            raise InvalidArgumentError("Unable to parse 'timeout': expected an unsigned integer")
        request.timeout_us = value
    elif key == "headers":
        raise InvalidArgumentError(
            "parameter 'headers' is reserved for Triton usage and should not be specified."
        )
    return False


def _output_parameters(name: str, params: dict[str, Any], regions: SharedMemoryRegistry) -> Parameters:
    result: Parameters = {}
    for key, value in params.items():
        if key == "binary_data" and not isinstance(value, bool):
            raise InvalidArgumentError(
                f"Unable to parse 'binary_data' of output '{name}': expected a boolean"
            )
        result[key] = _custom_parameter(key, value)
    class_count(name, result)
    where = shared_memory.placement(name, result)
    if where is not None:
        shared_memory.check_output(regions, where)
    return result


def _element_count(shape: Any, name: str) -> tuple[tuple[int, ...], int]:
    if not isinstance(shape, list):
        raise InvalidArgumentError(f"Unable to parse 'shape' of input '{name}': expected an array")
    dims: list[int] = []
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0 or dim > _MAX_DIM:
            raise InvalidArgumentError(
                f"Unable to parse 'shape' of input '{name}': each dimension must be a non-negative integer"
            )
        dims.append(dim)
    count = math.prod(dims)
    if count > _MAX_DIM:
        raise InvalidArgumentError(
            f"invalid shape for input '{name}': shape {_shape_text(dims)} causes total element count to "
            f"exceed maximum size of {_MAX_DIM}"
        )
    return tuple(dims), count


def _shape_text(dims: Sequence[int]) -> str:
    """A shape as Triton prints it in these messages: ``[2,3]``."""
    return "[" + ",".join(str(dim) for dim in dims) + "]"


def _check_byte_size(name: str, datatype: str, count: int) -> None:
    size = datatypes.ELEMENT_SIZE.get(datatype, 0)
    if size > 1 and count > _MAX_DIM // size:
        raise InvalidArgumentError(
            f"byte size overflow for input '{name}': element count ({count}) * data type size ({size}) "
            f"exceeds maximum allowed size ({_MAX_DIM})"
        )


def _decode_input(
    item: Any, binary: memoryview, offset: int, request: InferRequest, regions: SharedMemoryRegistry
) -> tuple[Tensor | InvalidArgumentError, int]:
    """The input ``item`` describes and where the next one's binary data starts; the error instead
    of the tensor when its contents (in the binary section or shared memory) do not match its
    datatype and shape, which Triton's core checks after every input is read."""
    model_name = request.model_name
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise InvalidArgumentError("Unable to parse 'inputs': each needs a string 'name'")
    name: str = item["name"]
    datatype = item.get("datatype")
    if not isinstance(datatype, str) or not datatypes.is_valid(datatype):
        raise InvalidArgumentError(f"invalid datatype for input {name}")
    shape, count = _element_count(item.get("shape"), name)
    _check_byte_size(name, datatype, count)
    if count == 0:
        datatypes.check_holdable(name, shape, datatype)
    if len(shape) > RankError.MAX_RANK:
        raise RankError(request.id, name, datatype, shape)
    params = _parameters(item.get("parameters"), f"input '{name}'")
    binary_size = params.get("binary_data_size")
    shm = params.get("shared_memory_region")
    sources = ("data" in item) + (binary_size is not None) + (shm is not None)
    if sources != 1:
        state = "But no field is set" if sources == 0 else "But multiple fields are set"
        raise InvalidArgumentError(
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            f"'parameters', 'shared_memory_region' in 'parameters'. {state}"
        )
    where = shared_memory.placement(name, params)
    if where is not None:
        try:
            array = shared_memory.read_input(regions, where, name, datatype, shape, request)
        except InvalidArgumentError as error:
            return error, offset
        return Tensor(name, datatype, array, shared_memory.without_placement(params)), offset
    # (Triton reads none of an input's other parameters; those of a type no parameter can hold are
    # dropped, as a frontend worker's message to the engine could not carry them)
    tensor_params = {
        k: v for k, v in params.items() if k != "binary_data_size" and isinstance(v, (bool, int, float, str))
    }
    if binary_size is not None:
        if isinstance(binary_size, bool) or not isinstance(binary_size, int) or binary_size < 0:
            raise InvalidArgumentError(f"Unable to parse 'binary_data_size' of input '{name}'")
        end = offset + binary_size
        if end > len(binary):
            raise InvalidArgumentError(
                f"unexpected size for input '{name}', expecting {binary_size} additional bytes for "
                f"model '{model_name}'"
            )
        try:
            array = _from_binary(binary[offset:end], datatype, shape, count, name, request)
        except InvalidArgumentError as error:
            return error, end
        return Tensor(name, datatype, array, tensor_params), end
    if count == 0 or not shape:
        # Triton's JSON reader counts no element for these shapes (an empty one included) and reads
        # no data: the model's shape check then refuses them, whatever ``data`` holds
        empty = np.zeros(shape, dtype=datatypes.NUMPY_DTYPE.get(datatype, np.object_))
        return Tensor(name, datatype, empty, tensor_params), offset
    if datatype == "BYTES":  # (its element count is checked as the core checks it: see _from_json_strings)
        try:
            strings = _from_json_strings(item["data"], shape, count, name, request)
        except _CountMismatch as error:
            return error, offset
        return Tensor(name, datatype, strings, tensor_params), offset
    return Tensor(
        name, datatype, _from_json(item["data"], datatype, shape, count, name), tensor_params
    ), offset


class _CountMismatch(InvalidArgumentError):
    """A JSON BYTES input with more or fewer strings than its shape says."""


def _from_json_strings(
    data: Any, shape: tuple[int, ...], count: int, name: str, request: InferRequest
) -> np.ndarray[Any, Any]:
    """A JSON BYTES input's array.  Triton's HTTP frontend serializes whatever strings ``data`` holds
    and its core then counts them against the shape, after every input is read, so a count that
    differs is worded as the core words it (as for a binary BYTES input), not as a shape mismatch."""
    flat: list[Any] = []
    _flatten_strings(data if isinstance(data, list) else [data], flat, count, 1)
    if len(flat) != count:
        subject = f"inference input '{name}' for model '{request.model_name}'"
        prefix = request_prefix(request.id)
        if len(flat) > count:  # (the walk stops at the first string too many, as the core's does)
            raise _CountMismatch(
                f"{prefix}unexpected number of string elements {count + 1} for {subject}, expecting {count}"
            )
        raise _CountMismatch(f"{prefix}expected {count} string elements for {subject}, got {len(flat)}")
    array = np.empty(count, dtype=np.object_)
    array[:] = flat
    return array.reshape(shape)


def _from_binary(
    chunk: memoryview, datatype: str, shape: tuple[int, ...], count: int, name: str, request: InferRequest
) -> np.ndarray[Any, Any]:
    """A binary input's array, refused in Triton's core's words when the bytes and the shape disagree."""
    prefix = request_prefix(request.id)
    model = request.model_name
    if datatype == "BYTES":
        return bytes_tensor.deserialize(chunk, count, name, model, prefix).reshape(shape)
    expected = count * datatypes.ELEMENT_SIZE[datatype]
    if expected != len(chunk):
        raise InvalidArgumentError(
            f"{prefix}input byte size mismatch for input '{name}' for model '{model}'. Expected "
            f"{expected}, got {len(chunk)}"
        )
    array = np.frombuffer(chunk, dtype=datatypes.WIRE_DTYPE[datatype], count=count)
    return array.reshape(shape)


#: Triton's words (its JSON reader's) for a value of the wrong JSON type.
NOT_STRING = "attempt to access JSON non-string as string"
NOT_BOOLEAN = "attempt to access JSON non-boolean as boolean"
NOT_SIGNED = "attempt to access JSON non-signed-integer as signed-integer"
NOT_UNSIGNED = "attempt to access JSON non-unsigned-integer as unsigned-integer"
NOT_NUMBER = "attempt to access JSON non-number as double"


def _shape_mismatch() -> InvalidArgumentError:
    return InvalidArgumentError("Unable to parse 'data': Shape does not match true shape of 'data' field")


def _from_json(
    data: Any, datatype: str, shape: tuple[int, ...], count: int, name: str
) -> np.ndarray[Any, Any]:
    if datatype in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"receiving {datatype} data via JSON is not supported. Please use the binary data format "
            f"for input {name}"
        )
    if not isinstance(data, list):
        data = [data]
    try:
        raw = np.asarray(data)
    except (ValueError, OverflowError):  # ragged, or nested past numpy's 64 dimensions
        raw = _flattened(data, count)
    if raw.size != count:
        raise _shape_mismatch()
    kind = raw.dtype.kind
    target = datatypes.NUMPY_DTYPE[datatype]
    if datatype == "BOOL":
        if kind != "b" and count:
            raise InvalidArgumentError(f"Unable to parse 'data': {NOT_BOOLEAN}")
    elif target.kind in _INT_KINDS:
        if kind not in _INT_KINDS and count:
            # numpy types integers past int64 as float64 (losing digits) or object: re-read them exactly
            try:
                exact = np.asarray(data, dtype=np.object_)
            except ValueError:
                raise _shape_mismatch() from None
            return _big_integers(exact, target, name).reshape(shape)
        if count:
            info = datatypes.integer_range(target)
            if int(raw.min()) < info.min or int(raw.max()) > info.max:
                raise InvalidArgumentError(
                    f"Unable to parse 'data' of input '{name}': a value is out of range for {datatype}"
                )
    elif kind not in "iuf" and count:
        raise InvalidArgumentError(f"Unable to parse 'data': {NOT_NUMBER}")
    return raw.astype(target, copy=False).reshape(shape)


def _big_integers(raw: np.ndarray[Any, Any], target: np.dtype[Any], name: str) -> np.ndarray[Any, Any]:
    """Integers numpy could not type by itself (beyond int64, e.g. UINT64 maxima), checked one by one."""
    info = datatypes.integer_range(target)
    flat = raw.reshape(-1)
    for value in flat:
        if isinstance(value, bool) or not isinstance(value, int):
            refusal = NOT_UNSIGNED if target.kind == "u" else NOT_SIGNED
            raise InvalidArgumentError(f"Unable to parse 'data': {refusal}")
        if not info.min <= value <= info.max:
            raise InvalidArgumentError(
                f"Unable to parse 'data' of input '{name}': a value is out of range for {target.name.upper()}"
            )
    return np.array(flat.tolist(), dtype=target)


#: How deep ``data`` may nest arrays: an element at this depth is refused (Triton's HTTP limit).
MAX_DATA_DEPTH = 100


def _too_deep() -> InvalidArgumentError:
    return InvalidArgumentError(f"JSON nesting depth exceeds maximum allowed limit ({MAX_DATA_DEPTH})")


def _flattened(data: list[Any], count: int) -> np.ndarray[Any, Any]:
    """The elements of ``data`` in order, however its arrays nest (as Triton reads them), refused
    where they nest :data:`MAX_DATA_DEPTH` deep; without recursion."""
    flat: list[Any] = []
    stack: list[tuple[Iterator[Any], int]] = [(iter(data), 1)]
    while stack:
        items, depth = stack[-1]
        for item in items:
            if isinstance(item, list):
                if depth + 1 >= MAX_DATA_DEPTH:
                    raise _too_deep()
                stack.append((iter(item), depth + 1))
                break
            flat.append(item)
            if len(flat) > count:
                raise _shape_mismatch()
        else:
            stack.pop()
    try:
        return np.asarray(flat)
    except (ValueError, OverflowError):
        raise _shape_mismatch() from None


def _flatten_strings(data: list[Any], out: list[Any], limit: int, depth: int) -> None:
    if depth >= MAX_DATA_DEPTH:
        raise _too_deep()
    for item in data:
        if isinstance(item, list):
            _flatten_strings(item, out, limit, depth + 1)
        elif isinstance(item, str):
            out.append(item.encode("utf-8"))
        else:
            raise InvalidArgumentError(f"Unable to parse JSON bytes array: {NOT_STRING}")
        if len(out) > limit:
            return


def encode_response(
    response: InferResponse, request: InferRequest, binary_output: bool
) -> tuple[bytes, list[bytes | np.ndarray[Any, Any]]]:
    """Encode a response: the JSON header and the binary chunks that follow it (may be none)."""
    wanted: dict[str, Parameters] = {}
    if request.outputs is not None:
        wanted = {o.name: o.parameters for o in request.outputs}
    chunks: list[bytes | np.ndarray[Any, Any]] = []
    outputs: list[dict[str, Any]] = []
    floats: list[dict[str, Any]] = []  # the outputs whose JSON data may hold non-finite values
    in_shm = shared_memory.shm_outputs(request)
    for tensor in response.outputs:
        shape = list(tensor.data.shape)
        if tensor.name in in_shm:  # written into the client's region: metadata only
            outputs.append({"name": tensor.name, "datatype": tensor.datatype, "shape": shape})
            continue
        # As Triton: a listed output is binary only by its own ``binary_data`` (default false); the
        # request's ``binary_data_output`` is the default for the outputs the request does not list.
        listed = wanted.get(tensor.name)
        as_binary = listed.get("binary_data", False) if listed is not None else binary_output
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": shape}
        params = dict(tensor.parameters)
        if as_binary:
            raw = wire_data(tensor)
            params["binary_data_size"] = wire_size(raw)
            chunks.append(raw)
        else:
            entry["data"] = data = _to_json_data(tensor)
            if isinstance(data, np.ndarray) and data.dtype.kind == "f":
                floats.append(entry)
        if params:
            entry["parameters"] = params
        outputs.append(entry)
    document: dict[str, Any] = {}
    if response.id:
        document["id"] = response.id
    document["model_name"] = response.model_name
    document["model_version"] = response.model_version
    if response.parameters:
        document["parameters"] = response.parameters
    document["outputs"] = outputs
    text = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    # orjson writes a non-finite float as null: a document without "null" has none (one scan of
    # the bytes, where testing each output's values would cost every JSON answer a few us)
    if floats and b"null" in text:
        for entry in floats:
            entry["data"] = non_finite_json(entry["data"])
        text = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    return text, chunks


def _to_json_data(tensor: Tensor) -> Any:
    if tensor.datatype in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"sending {tensor.datatype} data via JSON is not supported. Please use the binary data "
            f"format for output {tensor.name}"
        )
    flat = tensor.data.reshape(-1)
    if tensor.datatype == "BYTES":
        try:
            return [
                item.decode("utf-8") if isinstance(item, (bytes, bytearray)) else str(item) for item in flat
            ]
        except UnicodeDecodeError:
            raise InvalidArgumentError(
                f"output '{tensor.name}' holds bytes that are not UTF-8 text: request it with binary_data"
            ) from None
    if not flat.flags.c_contiguous:
        flat = np.ascontiguousarray(flat)
    return flat
