"""The order in which Triton walks a ``std::unordered_map<std::string, ...>`` of names.

Triton's core keeps a request's inputs and an ensemble's outputs in such maps, and what clients see
follows their iteration order: which of several faulty inputs a refusal names, the list of inputs an
input-count refusal prints, the order of an ensemble's outputs in its answers.  That order is
libstdc++'s (Triton's images are built with GCC): names hashed with ``std::hash<std::string>``
(``_Hash_bytes``, a 64-bit Murmur variant seeded ``0xc70f6907``), ``hash % bucket_count`` buckets
that grow along the prime rehash policy (13 buckets at the first insertion, then primes at least
twice as many), and one singly linked list in which a node goes to the front of its bucket's run, or
of the whole list when its bucket is empty; a rehash relinks the nodes in list order the same way.
Emulated here for the few names a request or a config holds (checked against Triton 2.51's
answers, which list the names in that order).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

_MASK = (1 << 64) - 1
_MUL = (0xC6A4A793 << 32) + 0x5BD1E995
_SEED = 0xC70F6907
#: libstdc++'s ``__fast_bkt`` (bucket counts for a request below 14) and the start of its
#: ``__prime_list``, enough for any map of names a request or a config holds.
_FAST = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)
_PRIMES = (
    17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 103, 109, 113, 127,
    137, 139, 149, 157, 167, 179, 193, 199, 211, 227, 241, 257, 277, 293, 313, 337, 359, 383, 409,
    439, 467, 503, 541, 577, 619, 661, 709, 761, 823, 887, 953, 1031, 1109, 1193, 1289, 1381, 1493,
    1613, 1741, 1879, 2029, 2179, 2357, 2549, 2753, 2971, 3209, 3469, 3739, 4027, 4349, 4703, 5087,
    5503, 5953, 6427, 6949, 7517, 8123, 8783, 9497, 10273, 11113, 12011, 12983, 14033, 15173, 16411,
)


def _shift_mix(value: int) -> int:
    return value ^ (value >> 47)


def string_hash(text: str) -> int:
    """``std::hash<std::string>`` of ``text`` (its UTF-8 bytes) with 64-bit ``size_t``."""
    data = text.encode("utf-8")
    length = len(data)
    aligned = length & ~7
    value = (_SEED ^ (length * _MUL)) & _MASK
    for start in range(0, aligned, 8):
        word = int.from_bytes(data[start : start + 8], "little")
        value ^= (_shift_mix((word * _MUL) & _MASK) * _MUL) & _MASK
        value = (value * _MUL) & _MASK
    if length & 7:
        value ^= int.from_bytes(data[aligned:], "little")
        value = (value * _MUL) & _MASK
    value = (_shift_mix(value) * _MUL) & _MASK
    return _shift_mix(value)


def _next_bucket_count(wanted: int) -> tuple[int, int]:
    """``_Prime_rehash_policy::_M_next_bkt``: the bucket count for ``wanted``, and the element count
    past which the table grows again (maximum load factor 1)."""
    if wanted < len(_FAST):
        count = _FAST[wanted] if wanted else 1
        return count, count
    for prime in _PRIMES:
        if prime >= wanted:
            return prime, prime
    raise ValueError(f"more names than this emulation holds: {wanted}")


def _place(order: list[tuple[str, int]], name: str, bucket: int) -> None:
    """``_M_insert_bucket_begin``: first of its bucket's run, or first of all when the bucket is empty."""
    for index, (_, other) in enumerate(order):
        if other == bucket:
            order.insert(index, (name, bucket))
            return
    order.insert(0, (name, bucket))


@lru_cache(maxsize=1024)
def _order(names: tuple[str, ...]) -> tuple[str, ...]:
    hashes = {name: string_hash(name) for name in names}
    buckets, grow_past = 1, 0
    order: list[tuple[str, int]] = []
    for count, name in enumerate(names):
        if count + 1 > grow_past:  # (``_M_need_rehash``)
            least = max(count + 1, 0 if grow_past else 11)
            if least >= buckets:
                buckets, grow_past = _next_bucket_count(max(math.floor(least) + 1, buckets * 2))
                relinked: list[tuple[str, int]] = []
                for kept, _ in order:
                    _place(relinked, kept, hashes[kept] % buckets)
                order = relinked
            else:
                grow_past = buckets
        _place(order, name, hashes[name] % buckets)
    return tuple(name for name, _ in order)


def unordered_map_order(names: Sequence[str]) -> list[str]:
    """``names`` (distinct, in the order they were inserted) in the order libstdc++'s
    ``std::unordered_map`` iterates them."""
    return list(_order(tuple(names)))
