"""BYTES tensors on the wire: each element a 4-byte little-endian length, then that many bytes.

This framing is shared by HTTP binary data, gRPC raw contents, shared memory and warmup files.  The
decoder never trusts a length prefix: every prefix is checked against the bytes that remain, so a lying
prefix is an error and never an allocation.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from naiad.core.errors import InvalidArgumentError

_LEN = struct.Struct("<I")


def serialize(array: np.ndarray[Any, Any]) -> bytes:
    """Length-prefix every element of a BYTES array (row-major)."""
    parts: list[bytes] = []
    for item in array.reshape(-1):
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray, memoryview)):
            item = str(item).encode("utf-8")
        parts.append(_LEN.pack(len(item)))
        parts.append(bytes(item))
    return b"".join(parts)


def deserialize(buffer: bytes | bytearray | memoryview, count: int, name: str) -> np.ndarray[Any, Any]:
    """Decode exactly ``count`` elements that must fill ``buffer`` exactly.

    ``count`` comes from the client's declared shape, so it is checked against what the buffer can
    hold (every element needs at least its 4-byte prefix) before the result array is made.
    """
    view = memoryview(buffer)
    size = len(view)
    if count * 4 > size:
        raise InvalidArgumentError(
            f"unexpected number of string elements {count} for input '{name}': "
            f"the data holds at most {size // 4}"
        )
    out = np.empty(count, dtype=np.object_)
    offset = 0
    for i in range(count):
        if offset + 4 > size:
            raise InvalidArgumentError(f"incomplete string length for input '{name}' at element {i}")
        (length,) = _LEN.unpack_from(view, offset)
        offset += 4
        end = offset + length
        if end > size:
            raise InvalidArgumentError(
                f"string element {i} of input '{name}' declares {length} bytes but only "
                f"{size - offset} remain"
            )
        out[i] = bytes(view[offset:end])
        offset = end
    if offset != size:
        raise InvalidArgumentError(
            f"unexpected trailing {size - offset} bytes after {count} string elements for input '{name}'"
        )
    return out


def serialized_size(array: np.ndarray[Any, Any]) -> int:
    """Byte size of :func:`serialize` without building it."""
    total = 0
    for item in array.reshape(-1):
        if isinstance(item, str):
            total += 4 + len(item.encode("utf-8"))
        elif isinstance(item, (bytes, bytearray, memoryview)):
            total += 4 + len(item)
        else:
            total += 4 + len(str(item).encode("utf-8"))
    return total
