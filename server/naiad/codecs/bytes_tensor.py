"""BYTES tensors on the wire: each element a 4-byte little-endian length, then that many bytes.

This framing is shared by HTTP binary data, gRPC raw contents, shared memory and warmup files.  The
decoder never trusts a length prefix: the prefixes must add up to the buffer exactly, so a lying prefix
is an error and never an allocation (an element is a slice of the buffer).

Tensors of millions of elements cross this codec several times per request when frontend workers
serve (a worker writes the engine's inputs in this framing, the engine reads them, and back for the
outputs), so neither direction spends Python per element where it can help it.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from naiad.core.errors import InvalidArgumentError
from naiad.core.map_order import unordered_map_order

_LEN = struct.Struct("<I")
#: How many elements, all as long, make writing them as one record array pay: for fewer, the record
#: array's extra copy costs more than joining them one by one.
_MANY = 64


class IncompleteString(InvalidArgumentError):
    """The last element runs past the end: a fault Triton's backend finds, not its core, so after
    every other input passed the core's checks (the codecs raise it last)."""


def serialize(array: np.ndarray[Any, Any]) -> bytes:
    """Length-prefix every element of a BYTES array (row-major)."""
    items = _as_bytes(array)
    lengths = list(map(len, items))
    width = lengths[0] if lengths else 0
    if width and len(lengths) >= _MANY and lengths.count(width) == len(lengths):  # no per-element work
        record = np.empty(len(items), _records(width))
        record["n"] = width
        record["d"] = np.frombuffer(b"".join(items), f"V{width}")
        return record.tobytes()
    return b"".join(itertools.chain.from_iterable(zip(map(_LEN.pack, lengths), items, strict=True)))


def deserialize(
    buffer: bytes | bytearray | memoryview, count: int, name: str, model: str = "", prefix: str = ""
) -> np.ndarray[Any, Any]:
    """Decode exactly ``count`` elements that must fill ``buffer`` exactly (``name``: the input's,
    ``model``: its model's, ``prefix``: the request's ``[request id: ...] ``, for the errors, which
    are Triton's).

    ``count`` comes from the client's declared shape, so it is checked against what the buffer can
    hold (every element needs at least its 4-byte prefix) before the result array is made.

    Elements all as long as the buffer's share per element are read as one numpy record array
    (a tenth of the time for a tensor of millions of short strings); others in one pass that checks
    nothing on the way, and a checking pass that words the fault only when the first one found the
    prefixes inconsistent.
    """
    view = memoryview(buffer)
    size = view.nbytes
    if count * 4 > size:
        _refuse(view, count, name, model, prefix)
    out = np.empty(count, dtype=np.object_)
    if count and size % count == 0:
        width = size // count - 4
        record = np.ndarray((count,), _records(width), view)
        if (record["n"] == width).all():
            out[:] = record["d"].tolist() if width else [b""] * count
            return out
    data = bytes(view)
    unpack = _LEN.unpack_from
    items = [b""] * count
    offset = 0
    try:
        for i in range(count):
            (length,) = unpack(data, offset)
            offset += 4
            end = offset + length
            items[i] = data[offset:end]  # (past the end: shorter, and ``offset`` then ends past ``size``)
            offset = end
    except struct.error:
        offset = -1
    if offset != size:
        _refuse(view, count, name, model, prefix)
    out[:] = items
    return out


def refused_first(
    refusals: Sequence[tuple[str, InvalidArgumentError]], names: Sequence[str]
) -> InvalidArgumentError:
    """Which of the inputs' refusals (``(input name, error)``, in the request's order) a request is
    answered with, as Triton orders them: its core checks every input's contents before a backend
    reads any, in the order its map of the request's inputs (``names``) iterates them
    (:mod:`naiad.core.map_order`); a backend's fault (:class:`IncompleteString`) comes after every core
    fault, the first input's first."""
    core = {name: error for name, error in refusals if not isinstance(error, IncompleteString)}
    if core:
        for name in unordered_map_order(list(dict.fromkeys(names))):
            if name in core:
                return core[name]
    return refusals[0][1]


def _refuse(view: memoryview, count: int, name: str, model: str, prefix: str) -> None:
    """Why ``count`` elements do not fill ``view`` exactly, raised for the first fault, as Triton's
    core words it (it walks the buffer the same way: a length prefix cut short, more elements than
    the shape says, fewer).  An element that runs past the end passes that walk when it is the last
    one the shape expects: its backend refuses it then, in the words used here (Triton 2.51's)."""
    size = view.nbytes
    subject = f"inference input '{name}'" + (f" for model '{model}'" if model else "")
    offset = checked = 0
    while offset < size:
        if size - offset < 4:
            raise InvalidArgumentError(
                f"{prefix}incomplete string length indicator for {subject}, expecting 4 bytes but only "
                f"{size - offset} bytes available. Please make sure the string length indicator is "
                "in one buffer."
            )
        (length,) = _LEN.unpack_from(view, offset)
        checked += 1
        if checked > count:
            raise InvalidArgumentError(
                f"{prefix}unexpected number of string elements {checked} for {subject}, expecting {count}"
            )
        offset += 4
        if offset + length > size and checked == count:
            raise IncompleteString(
                f"incomplete string data for inference input '{name}', expecting string of length "
                f"{length} but only {size - offset} bytes available"
            )
        offset += length
    raise InvalidArgumentError(f"{prefix}expected {count} string elements for {subject}, got {checked}")


def serialized_size(array: np.ndarray[Any, Any]) -> int:
    """Byte size of :func:`serialize` without building it."""
    items = _as_bytes(array)
    return 4 * len(items) + sum(map(len, items))


def _as_bytes(array: np.ndarray[Any, Any]) -> list[bytes]:
    """The elements as ``bytes`` (row-major): strings in UTF-8, anything else as its ``str``."""
    items: list[Any] = array.reshape(-1).tolist()
    if set(map(type, items)) <= {bytes}:
        return items
    return [_element(item) for item in items]


def _element(item: Any) -> bytes:
    if type(item) is bytes:
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    return str(item).encode("utf-8")


def _records(width: int) -> np.dtype[Any]:
    """Elements ``width`` bytes long, as they lie on the wire: the prefix, then the bytes (``V``:
    kept whole, trailing NULs too)."""
    return np.dtype([("n", "<u4"), ("d", f"V{width}")]) if width else np.dtype([("n", "<u4")])
