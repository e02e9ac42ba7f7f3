"""BYTES tensors' wire framing: elements all as long (read and written as one record array) and of
different lengths (one pass), the same bytes either way, and every malformed buffer refused with the
fault's own words."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from naiad.codecs.bytes_tensor import deserialize, serialize, serialized_size
from naiad.core.errors import InvalidArgumentError

_IN = "inference input 'IN' for model 'm'"


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
        # Triton's core's words (infer_request.cc), in the order its walk finds the fault
        (b"\x01\x00\x00", 1, f"incomplete string length indicator for {_IN}, expecting 4 bytes but only 3 "
         "bytes available. Please make sure the string length indicator is in one buffer."),
        (_framed([b"a"]) + b"\x00\x00", 2, f"incomplete string length indicator for {_IN}, expecting 4 bytes but only 2"),
        (_framed([b"a"]) + b"\x00\x00\x00\x00" + b"\x07\x00\x00", 3, "only 3 bytes available"),
        (_framed([b"ab"] * 3), 2, f"unexpected number of string elements 3 for {_IN}, expecting 2"),
        (_framed([b"ab"] * 3), 5, f"expected 5 string elements for {_IN}, got 3"),
        (_framed([b"a"]) + b"\x05\x00\x00\x00ab", 3, f"expected 3 string elements for {_IN}, got 2"),
        # the last element running past the end (Triton's core lets its backend find it, in these words)
        (_framed([b"a"]) + b"\x05\x00\x00\x00ab", 2, "incomplete string data for inference input 'IN', "
         "expecting string of length 5 but only 2 bytes available"),
        # as long as a record array would read them, but one prefix says otherwise
        (_framed([b"ab"] * 99) + b"\x09\x00\x00\x00ab", 100, "expecting string of length 9 but only 2"),
        (_framed([b"ab"] * 99) + b"\x01\x00\x00\x00ab", 100, "expecting 4 bytes but only 1 bytes available"),
    ],
)
def test_malformed_buffers_are_refused_with_the_fault(wire: bytes, count: int, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        deserialize(wire, count, "IN", "m")
    assert message in caught.value.message


def test_without_a_model_the_input_alone_is_named() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^expected 2 string elements for inference input 'IN', got 1$"):
        deserialize(_framed([b"a"]), 2, "IN")


def test_a_declared_count_is_checked_before_anything_is_made() -> None:
    with pytest.raises(InvalidArgumentError, match=f"expected {1 << 40} string elements for {_IN}, got 2"):
        deserialize(b"\x00" * 8, 1 << 40, "IN", "m")


def test_millions_of_elements() -> None:
    """The size NVIDIA's qa sends (L0_grpc's ten million ``bytes_contents``), as long and not."""
    same = np.empty(2_000_000, dtype=np.object_)
    same[:] = [b"A"] * len(same)
    assert list(deserialize(serialize(same), len(same), "IN")[-3:]) == [b"A"] * 3
    mixed = np.empty(1_000_000, dtype=np.object_)
    mixed[:] = [b"A" * (i % 3) for i in range(len(mixed))]
    decoded = deserialize(serialize(mixed), len(mixed), "IN")
    assert decoded[999_998] == b"AA" and decoded[999_999] == b""
