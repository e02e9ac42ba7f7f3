"""Input tensors for the requests: random or zero data, or perf_analyzer's ``--input-data`` JSON file.

perf_analyzer's JSON format: ``{"data": [STEP, ...]}`` where a step maps each input name to a flat,
row-major list of values, ``{"b64": "..."}`` (raw little-endian bytes; BYTES elements with their 4-byte
length prefixes), or ``{"content": <list or b64>, "shape": [...]}``.  For sequence models ``data`` may
instead hold several streams (``[[STEP, ...], [STEP, ...]]``), each played back on its own sequence.
Every step holds batch-1 data; ``-b N`` repeats it N times, as perf_analyzer does.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from naiad.tools.perf.model import ModelInfo, TensorSpec

_NUMPY = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": np.uint16,  # sent as raw bits; only the byte size matters to the wire
}


class InputDataError(ValueError):
    """The model's inputs cannot be built from what the user gave (message names the input)."""


@dataclass(frozen=True)
class Tensor:
    """One request input: raw little-endian bytes (BYTES: 4-byte length-prefixed elements)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    raw: bytes

    def json_data(self) -> list[Any]:
        """The flat JSON ``data`` list of the KServe v2 JSON tensor form."""
        if self.datatype == "BYTES":
            return [item.decode("utf-8", errors="replace") for item in split_bytes(self.raw)]
        return np.frombuffer(self.raw, dtype=_NUMPY[self.datatype]).tolist()  # type: ignore[no-any-return, unused-ignore]


Step = tuple[Tensor, ...]


def split_bytes(raw: bytes) -> list[bytes]:
    items, offset = [], 0
    while offset + 4 <= len(raw):
        (length,) = struct.unpack_from("<I", raw, offset)
        items.append(raw[offset + 4 : offset + 4 + length])
        offset += 4 + length
    return items


def _join_bytes(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def parse_shapes(texts: list[str]) -> dict[str, tuple[int, ...]]:
    """``--shape NAME:d1,d2`` (perf_analyzer's form), repeatable."""
    shapes: dict[str, tuple[int, ...]] = {}
    for text in texts:
        name, sep, dims = text.rpartition(":")
        try:
            shape = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            shape = ()
        if not sep or not name or not shape or min(shape) < 0:
            raise InputDataError(f"--shape {text}: expected NAME:d1,d2,... with non-negative integers")
        shapes[name] = shape
    return shapes


@dataclass(frozen=True)
class DataOptions:
    mode: str  # "random", "zero" or a JSON file path
    batch: int
    shapes: dict[str, tuple[int, ...]]
    string_length: int = 128
    string_data: str | None = None
    seed: int = 0


def _shape(spec: TensorSpec, options: DataOptions, given: list[int] | None = None) -> tuple[int, ...]:
    if given is not None:
        return tuple(int(d) for d in given)
    shape = options.shapes.get(spec.name, spec.shape)
    if any(d < 0 for d in shape):
        raise InputDataError(
            f"input {spec.name} contains dynamic shape {list(spec.shape)}, provide shapes to send along "
            'with the request (--shape NAME:d1,d2 or a "shape" in --input-data)'
        )
    return tuple(shape)


def _synthetic(
    spec: TensorSpec, shape: tuple[int, ...], options: DataOptions, rng: np.random.Generator
) -> bytes:
    count = math.prod(shape)
    if spec.datatype == "BYTES":
        if options.string_data is not None:
            item = options.string_data.encode()
        elif options.mode == "zero":
            item = b"0" * options.string_length
        else:
            letters = rng.integers(97, 123, options.string_length, dtype=np.uint8)
            item = letters.tobytes()
        return _join_bytes([item] * count)
    dtype = _NUMPY.get(spec.datatype)
    if dtype is None:
        raise InputDataError(f"input {spec.name}: unsupported datatype {spec.datatype}")
    if options.mode == "zero":
        return np.zeros(count, dtype=dtype).tobytes()
    if spec.datatype in ("FP16", "FP32", "FP64"):
        return rng.random(count).astype(dtype).tobytes()
    if spec.datatype == "BOOL":
        return rng.integers(0, 2, count).astype(dtype).tobytes()
    return rng.integers(0, 100, count).astype(dtype).tobytes()


def _from_json(spec: TensorSpec, value: Any) -> tuple[bytes, list[int] | None]:
    """Raw bytes and the optional shape of one tensor entry of the JSON file."""
    shape = None
    if isinstance(value, dict) and "content" in value:
        shape = value.get("shape")
        value = value["content"]
    if isinstance(value, dict) and "b64" in value:
        try:
            return base64.b64decode(str(value["b64"]), validate=True), shape
        except (binascii.Error, ValueError):
            raise InputDataError(f"input {spec.name}: 'b64' is not valid base64") from None
    if not isinstance(value, list):
        raise InputDataError(f'input {spec.name}: expected a list, {{"b64": ...}} or {{"content": ...}}')
    if spec.datatype == "BYTES":
        flat = np.array(value, dtype=object).reshape(-1)
        return _join_bytes([str(v).encode() for v in flat]), shape
    dtype = _NUMPY.get(spec.datatype)
    if dtype is None:
        raise InputDataError(f"input {spec.name}: unsupported datatype {spec.datatype}")
    try:
        return np.array(value, dtype=dtype).reshape(-1).tobytes(), shape
    except (ValueError, TypeError):
        raise InputDataError(f"input {spec.name}: values do not fit {spec.datatype}") from None


def _count(datatype: str, raw: bytes) -> int:
    if datatype == "BYTES":
        return len(split_bytes(raw))
    return len(raw) // np.dtype(_NUMPY[datatype]).itemsize


def _batched(spec: TensorSpec, raw: bytes, shape: tuple[int, ...], info: ModelInfo, batch: int) -> Tensor:
    expected = math.prod(shape)
    if _count(spec.datatype, raw) != expected:
        raise InputDataError(
            f"input {spec.name}: {_count(spec.datatype, raw)} elements given, shape {list(shape)} needs "
            f"{expected}"
        )
    if info.max_batch_size > 0:
        return Tensor(spec.name, spec.datatype, (batch, *shape), raw * batch)
    return Tensor(spec.name, spec.datatype, shape, raw)


def build_streams(info: ModelInfo, options: DataOptions) -> list[list[Step]]:
    """The request inputs as streams of steps (one stream, one step, for random or zero data)."""
    if info.max_batch_size == 0 and options.batch != 1:
        raise InputDataError(f"model {info.name} does not support batching (max_batch_size 0): use -b 1")
    if info.max_batch_size > 0 and options.batch > info.max_batch_size:
        raise InputDataError(
            f"batch size {options.batch} is larger than model {info.name}'s max_batch_size "
            f"{info.max_batch_size}"
        )
    if options.mode in ("random", "zero"):
        rng = np.random.default_rng(options.seed)
        step = []
        for spec in info.inputs:
            shape = _shape(spec, options)
            step.append(_batched(spec, _synthetic(spec, shape, options, rng), shape, info, options.batch))
        return [[tuple(step)]]
    return _read_file(Path(options.mode), info, options)


def _read_file(path: Path, info: ModelInfo, options: DataOptions) -> list[list[Step]]:
    try:
        document = json.loads(path.read_text())
    except OSError as error:
        raise InputDataError(f"--input-data {path}: {error.strerror}") from None
    except ValueError as error:
        raise InputDataError(f"--input-data {path}: not JSON ({error})") from None
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list) or not data:
        raise InputDataError(f'--input-data {path}: expected {{"data": [...]}} with at least one entry')
    streams = data if all(isinstance(entry, list) for entry in data) else [data]
    built = []
    for stream in streams:
        steps = []
        for entry in stream:
            if not isinstance(entry, dict):
                raise InputDataError(f"--input-data {path}: each step must be an object of input names")
            step = []
            for spec in info.inputs:
                if spec.name not in entry:
                    raise InputDataError(f"--input-data {path}: a step has no data for input {spec.name}")
                raw, given = _from_json(spec, entry[spec.name])
                shape = _shape(spec, options, given)
                step.append(_batched(spec, raw, shape, info, options.batch))
            steps.append(tuple(step))
        if steps:
            built.append(steps)
    return built
