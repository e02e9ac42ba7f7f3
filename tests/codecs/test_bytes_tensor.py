"""BYTES tensors' wire framing: elements all as long (read and written as one record array) and of
different lengths (one pass), the same bytes either way, and every malformed buffer refused with the
fault's own words."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from naiad.codecs.bytes_tensor import deserialize, serialize, serialized_size
from naiad.core.errors import InvalidArgumentError


def _framed(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


@pytest.mark.parametrize(
    "items",
    [
        [],
        [b""],
        [b"", b"", b""],
        [b"ab\x00", b"\x00cd"],  # trailing and leading NULs kept (numpy's S type would drop them)
        [b"x\x00" * 3] * 200,  # as long, many: the record array
        [b""] * 100,
        [b"a", b"bcd", b"", b"\xff" * 300],
        [bytes([i % 256]) * (i % 7) for i in range(1000)],
        [b"z" * 70_000],
    ],
)
def test_round_trip_is_the_wire_framing(items: list[bytes]) -> None:
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    wire = serialize(array)
    assert wire == _framed(items)
    assert serialized_size(array) == len(wire)
    decoded = deserialize(wire, len(items), "IN")
    assert decoded.dtype == np.object_ and decoded.shape == (len(items),)
    assert [type(item) for item in decoded] == [bytes] * len(items)
    assert list(decoded) == items
    assert list(deserialize(memoryview(bytearray(wire)), len(items), "IN")) == items


def test_elements_that_are_not_bytes_are_written_as_text() -> None:
    array = np.array([["héllo", 3], [2.5, np.bytes_(b"np")]], dtype=np.object_)
    assert serialize(array) == _framed(["héllo".encode(), b"3", b"2.5", b"np"])
    assert serialized_size(array) == len(serialize(array))
    many = np.array(["ab"] * 100, dtype=np.object_)  # as long, many, not bytes
    assert serialize(many) == _framed([b"ab"] * 100)


@pytest.mark.parametrize(
    ("wire", "count", "message"),
    [
        (b"\x01\x00\x00", 1, "unexpected number of string elements 1 for input 'IN': the data holds at most 0"),
        (_framed([b"a"]) + b"\x05\x00\x00\x00ab", 2, "string element 1 of input 'IN' declares 5 bytes but only 2 remain"),
        (_framed([b"a"]) + b"\x00\x00", 2, "unexpected number of string elements 2 for input 'IN'"),
        (_framed([b"ab"]) + b"\x01\x00", 1, "unexpected trailing 2 bytes after 1 string elements for input 'IN'"),
        (_framed([b"a"]) + b"\x00\x00\x00\x00" + b"\x07\x00\x00", 3, "incomplete string length for input 'IN' at element 2"),
        # as long as a record array would read them, but one prefix says otherwise
        (_framed([b"ab"] * 99) + b"\x09\x00\x00\x00ab", 100, "string element 99 of input 'IN' declares 9 bytes"),
        (_framed([b"ab"] * 99) + b"\x01\x00\x00\x00ab", 100, "unexpected trailing 1 bytes after 100 string elements"),
    ],
)
def test_malformed_buffers_are_refused_with_the_fault(wire: bytes, count: int, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        deserialize(wire, count, "IN")
    assert message in caught.value.message


def test_a_declared_count_is_checked_before_anything_is_made() -> None:
    with pytest.raises(InvalidArgumentError, match="the data holds at most 2"):
        deserialize(b"\x00" * 8, 1 << 40, "IN")


def test_millions_of_elements() -> None:
    """The size NVIDIA's qa sends (L0_grpc's ten million ``bytes_contents``), as long and not."""
    same = np.empty(2_000_000, dtype=np.object_)
    same[:] = [b"A"] * len(same)
    assert list(deserialize(serialize(same), len(same), "IN")[-3:]) == [b"A"] * 3
    mixed = np.empty(1_000_000, dtype=np.object_)
    mixed[:] = [b"A" * (i % 3) for i in range(len(mixed))]
    decoded = deserialize(serialize(mixed), len(mixed), "IN")
    assert decoded[999_998] == b"AA" and decoded[999_999] == b""
