"""Triton's generate extension: flat JSON objects <-> core requests and responses.

``POST /v2/models/{m}/generate`` (and ``generate_stream``) take ``{"text_input": "...", "parameters":
{...}, ...}``, read member by member in the order written, as Triton reads them: a key that names a
model input becomes that input (a value or a flat list of values, of the datatype the model declares,
shaped to the model's input shape: fixed dimensions take their share of the elements, the innermost
variable one the rest, any other variable one 1; a batching model's batch dimension is such a one), a
key given twice is an input given twice; ``id`` is the request's id; ``parameters`` is an object read
the same way; any other key is a request parameter (a string, integer, boolean or number); ``NaN``,
``Infinity`` and ``-Infinity`` are numbers, as for Triton's parser.  A response is ``{"id": ...,
"model_name": ..., "model_version": ..., <parameter>: value, <output>: value, ...}`` with its members
sorted by name, as Triton writes it: an output of one element as a scalar, a longer one as a flat list,
BYTES as text, non-finite floats as ``NaN``/``Infinity``/``-Infinity``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import orjson

from naiad.codecs.json_v2 import (
    NOT_BOOLEAN,
    NOT_NUMBER,
    NOT_SIGNED,
    NOT_STRING,
    NOT_UNSIGNED,
    non_finite_json,
)
from naiad.core import datatypes
from naiad.core.errors import InvalidArgumentError, request_prefix
from naiad.core.request import InferRequest, InferResponse, Tensor
from naiad.core.signature import ModelSignature, TensorSpec

_RESERVED = frozenset({"sequence_id", "sequence_start", "sequence_end", "priority", "timeout"})


def decode_generate(
    body: bytes,
    signature: ModelSignature,
    model_name: str,
    model_version: str,
    max_input_size: int | None = None,
) -> InferRequest:
    """The core request a generate body asks for (checked against ``signature`` by the data plane)."""
    members = _members(body)
    request = InferRequest(model_name=model_name, model_version=model_version)
    for key, value in members:
        if key == "id":
            if not isinstance(value, str):
                raise InvalidArgumentError(f"Unable to parse 'id': {NOT_STRING}")
            request.id = value
    _Reader(request, signature, max_input_size).read(members)
    return request


def _members(body: bytes) -> list[tuple[str, Any]]:
    """The top-level members of the body in order, a key given twice kept twice (the standard
    library's parser keeps them; orjson keeps the last)."""
    if not body.strip():
        return []
    try:
        document = json.loads(body, object_pairs_hook=_pairs)  # (NaN and Infinity too, as Triton's parser)
    except (ValueError, RecursionError) as exc:  # (malformed, or nested past the recursion limit)
        raise InvalidArgumentError(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(document, _Pairs):
        raise InvalidArgumentError("failed to parse the request JSON buffer: expected a JSON object")
    return list(document)


class _Pairs(list[tuple[str, Any]]):
    """A JSON object's members, in order (see :func:`_members`)."""


def _pairs(pairs: list[tuple[str, Any]]) -> _Pairs:
    return _Pairs(pairs)


class _Reader:
    """Turns members into inputs and parameters, as Triton's generate request conversion does."""

    def __init__(self, request: InferRequest, signature: ModelSignature, max_input_size: int | None) -> None:
        self._request = request
        self._signature = signature
        self._limit = max_input_size
        self._consumed = 0
        self._names: set[str] = set()

    def read(self, members: list[tuple[str, Any]], where: str = "") -> None:
        for key, value in members:
            if key == "id" and not where:
                continue
            if key == "parameters" and not where:
                if self._signature.input_spec(key) is not None:
                    raise InvalidArgumentError(
                        "Keyword 'parameters' for nested schema also given as input tensor name"
                    )
                if not isinstance(value, _Pairs):
                    raise InvalidArgumentError(
                        "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object "
                        "as object"
                    )
                try:
                    self.read(value, "parameters")
                except InvalidArgumentError as exc:
                    raise InvalidArgumentError(f"Converting keyword: 'parameters': {exc.message}") from None
                continue
            spec = self._signature.input_spec(key)
            if spec is None:
                _parameter(self._request, key, value)
            else:
                self._input(spec, value)

    def _input(self, spec: TensorSpec, value: Any) -> None:
        request = self._request
        if spec.name in self._names:
            raise InvalidArgumentError(
                f"{request_prefix(request.id)}input '{spec.name}' already exists in request"
            )
        self._names.add(spec.name)
        values = value if isinstance(value, list) else [value]
        array = _array(spec, values)
        size = sum(len(item) + 4 for item in array) if spec.datatype == "BYTES" else array.nbytes
        if self._limit is not None and size and self._consumed + size > self._limit:
            raise InvalidArgumentError(
                f"request size of {self._consumed} bytes with input '{spec.name}' of size {size} bytes "
                f"exceeds the maximum allowed input size of {self._limit}. Use --http-max-input-size to "
                "increase the limit."
            )
        self._consumed += size
        shape = _fitted(spec.name, self._signature.full_shape(spec), len(values))
        request.inputs.append(Tensor(spec.name, spec.datatype, array.reshape(shape)))


def _fitted(name: str, dims: list[int], count: int) -> tuple[int, ...]:
    """The model's shape for ``count`` elements: fixed dimensions divide the count, the innermost
    variable one takes what is left, the others are 1 (Triton's two passes)."""
    left = count
    for dim in reversed(dims):
        if dim != -1:
            if dim == 0 or left % dim:
                raise InvalidArgumentError(
                    f"The schema can not convert input '{name}' to tensor with proper shape"
                )
            left //= dim
    shape = list(dims)
    for index in range(len(shape) - 1, -1, -1):
        if shape[index] == -1:
            shape[index], left = left, 1
    if math.prod(shape) != count:  # (elements left over, or none for a shape without a variable dimension)
        raise InvalidArgumentError(f"The schema can not convert input '{name}' to tensor with proper shape")
    return tuple(shape)


def _parameter(request: InferRequest, key: str, value: Any) -> None:
    if key.startswith("triton_"):
        raise InvalidArgumentError(
            "parameter keys starting with 'triton_' are reserved for Triton usage and should not be "
            "specified."
        )
    if not isinstance(value, bool | int | float | str):
        raise InvalidArgumentError(
            f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
        )
    if key not in _RESERVED:
        request.parameters[key] = value
    elif key == "sequence_id":
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise InvalidArgumentError(
                "Unable to parse 'sequence_id': expected an unsigned integer or a string"
            )
        request.sequence_id = value
    elif key in ("sequence_start", "sequence_end"):
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"Unable to parse '{key}': expected a boolean")
        setattr(request, key, value)
    else:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgumentError(f"Unable to parse '{key}': expected an unsigned integer")
        if key == "priority":
            request.priority = value
        else:
            request.timeout_us = value


def _array(spec: TensorSpec, values: list[Any]) -> np.ndarray[Any, Any]:
    """The values as a flat array of the input's datatype; a value of the wrong JSON type is refused
    with Triton's words."""
    datatype = spec.datatype
    if datatype in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"receiving {datatype} data via JSON is not supported. Please use the binary data format for "
            f"input {spec.name}"
        )
    target = datatypes.NUMPY_DTYPE[datatype]
    if datatype == "BYTES":
        if not all(isinstance(item, str) for item in values):
            raise InvalidArgumentError(f"Unable to parse 'data': {NOT_STRING}")
        array: np.ndarray[Any, Any] = np.empty(len(values), dtype=np.object_)
        array[:] = [item.encode("utf-8") for item in values]
        return array
    if datatype == "BOOL":
        if not all(isinstance(item, bool) for item in values):
            raise InvalidArgumentError(f"Unable to parse 'data': {NOT_BOOLEAN}")
    elif target.kind in "iu":
        refusal = NOT_UNSIGNED if target.kind == "u" else NOT_SIGNED
        info = datatypes.integer_range(target)
        for item in values:
            if isinstance(item, bool) or not isinstance(item, int) or not info.min <= item <= info.max:
                raise InvalidArgumentError(f"Unable to parse 'data': {refusal}")
    elif not all(isinstance(item, int | float) and not isinstance(item, bool) for item in values):
        raise InvalidArgumentError(f"Unable to parse 'data': {NOT_NUMBER}")
    return np.array(values, dtype=target)


def encode_generate(response: InferResponse) -> bytes:
    """The generate response object for one response, its members sorted by name as Triton writes
    them; a name taken twice keeps the first of ``id``/``model_name``/``model_version``, then
    parameters, then outputs (Triton's order of precedence)."""
    document: dict[str, Any] = {}
    if response.id:
        document["id"] = response.id
    document["model_name"] = response.model_name
    document["model_version"] = response.model_version
    for key, value in (response.parameters or {}).items():
        document.setdefault(key, value)
    floats: list[Tensor] = []
    for tensor in response.outputs:
        if tensor.name not in document:
            document[tensor.name] = _value(tensor)
            if tensor.data.dtype.kind == "f":
                floats.append(tensor)
    text = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    if floats and b"null" in text:  # (a non-finite float, written as null: see json_v2.encode_response)
        for tensor in floats:
            flat = tensor.data.reshape(-1)
            document[tensor.name] = non_finite_json(flat, document[tensor.name])
        text = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    return text


def _value(tensor: Tensor) -> Any:
    """An output's elements as a flat list, as Triton writes them (one element: the element)."""
    if tensor.datatype in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"sending {tensor.datatype} data via JSON is not supported for output {tensor.name}"
        )
    data = tensor.data
    if tensor.datatype == "BYTES":
        texts = [
            item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
            for item in data.reshape(-1)
        ]
        return texts[0] if len(texts) == 1 else texts
    flat = data.reshape(-1)
    # (as Python numbers, which orjson writes as Triton does: a float32 with its double's digits)
    return flat[0].item() if flat.size == 1 else flat.tolist()
