"""libstdc++'s ``std::unordered_map`` iteration order, emulated: each expected order below is Triton
2.51's own (the input list of its input-count refusal, or an ensemble's outputs in its answers)."""

from __future__ import annotations

import pytest
from naiad.core.map_order import string_hash, unordered_map_order


@pytest.mark.parametrize(
    ("inserted", "iterated"),
    [
        (["SUM", "DIFF"], ["DIFF", "SUM"]),
        (["A", "B", "C"], ["B", "C", "A"]),
        (["S1", "D1", "S2", "D2", "EXTRA_LONG_NAME"], ["D2", "S2", "D1", "EXTRA_LONG_NAME", "S1"]),
        (["INPUT0", "INPUT1", "x", "y", "z"], ["z", "y", "INPUT1", "x", "INPUT0"]),
        (  # (15 names: the table grew from 13 buckets to 29 on the way)
            ["INPUT1", "alpha", "INPUT0", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
             "kappa", "lambda", "mu", "nu"],
            ["mu", "INPUT1", "eta", "kappa", "alpha", "delta", "nu", "INPUT0", "zeta", "lambda", "gamma", "iota",
             "epsilon", "beta", "theta"],
        ),
        (
            ["INPUT0", "INPUT1"] + [f"extra_{i}" for i in range(16)],
            ["extra_15", "extra_14", "extra_13", "extra_12", "extra_11", "extra_7", "INPUT1", "extra_2", "extra_0",
             "extra_4", "extra_10", "extra_1", "extra_3", "extra_5", "extra_6", "extra_8", "INPUT0", "extra_9"],
        ),
    ],
)
def test_names_iterate_in_tritons_order(inserted: list[str], iterated: list[str]) -> None:
    assert unordered_map_order(inserted) == iterated


def test_the_hash_is_libstdcxx_murmur() -> None:
    # std::hash<std::string>: every byte counts, the tail of fewer than 8 bytes included
    assert string_hash("") != string_hash("\0")
    assert string_hash("abcdefgh") != string_hash("abcdefgi")
    assert len({string_hash(name) for name in ("a", "b", "ab", "ba", "abcdefghi")}) == 5
    assert unordered_map_order([]) == []
