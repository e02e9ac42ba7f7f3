"""The batch arithmetic every framework backend shares: concat, split, reshape."""

from __future__ import annotations

import numpy as np
import pytest
from naiad.backends.batching import concat_batch, reshape_batch, split_batch


def test_concat_then_split_round_trips_batches_of_1_2_3() -> None:
    parts = [np.full((n, 4), n, dtype=np.float32) for n in (1, 2, 3)]
    batched = concat_batch(parts)
    assert batched.shape == (6, 4)
    back = split_batch(batched, [1, 2, 3])
    assert [p.shape for p in back] == [(1, 4), (2, 4), (3, 4)]
    for original, recovered in zip(parts, back, strict=True):
        np.testing.assert_array_equal(original, recovered)


def test_bytes_tensors_batch_as_object_arrays() -> None:
    first = np.array([[b"a", b"bc\x00"]], dtype=np.object_)
    second = np.array([[b"", b"\xff"], [b"x", b"y"]], dtype=np.object_)
    batched = concat_batch([first, second])
    assert batched.dtype == np.object_ and batched.shape == (3, 2)
    back = split_batch(batched, [1, 2])
    assert back[0].tolist() == [[b"a", b"bc\x00"]]  # trailing NUL kept: never np.bytes_
    assert back[1].tolist() == second.tolist()


def test_single_tensor_is_not_copied() -> None:
    only = np.zeros((2, 3))
    assert concat_batch([only]) is only
    assert split_batch(only, [2])[0] is only


def test_split_views_share_memory_with_the_batch() -> None:
    batched = np.arange(12).reshape(6, 2)
    assert all(np.shares_memory(part, batched) for part in split_batch(batched, [1, 2, 3]))


def test_ragged_inputs_are_flattened_end_to_end() -> None:
    parts = [np.array([[1, 2, 3]]), np.array([[4]]), np.array([[5, 6]])]
    np.testing.assert_array_equal(concat_batch(parts, ragged=True), [1, 2, 3, 4, 5, 6])


def test_mismatched_shapes_and_row_counts_are_errors() -> None:
    with pytest.raises(ValueError, match="non-batch dimensions differ"):
        concat_batch([np.zeros((1, 3)), np.zeros((1, 4))])
    with pytest.raises(ValueError, match="expected 6 rows"):
        split_batch(np.zeros((5, 2)), [1, 2, 3])
    with pytest.raises(ValueError, match="at least one"):
        concat_batch([])


def test_reshape_keeps_the_batch_dimension_and_inverts() -> None:
    x = np.arange(2 * 16).reshape(2, 16)
    model = reshape_batch(x, (16,), (4, 4), batched=True)
    assert model.shape == (2, 4, 4)
    np.testing.assert_array_equal(reshape_batch(model, (4, 4), (16,), batched=True), x)


def test_reshape_to_and_from_a_scalar() -> None:
    column = np.array([[1.0], [2.0]])
    assert reshape_batch(column, (1,), (), batched=True).shape == (2,)
    assert reshape_batch(np.array([3.0]), (1,), (), batched=False).shape == ()
    assert reshape_batch(np.array(3.0), (), (1,), batched=False).shape == (1,)


def test_reshape_maps_variable_dimensions_in_order() -> None:
    """Two ``-1``: numpy alone cannot resolve them; Triton pairs them up in order."""
    x = np.zeros((1, 3, 5, 2))
    assert reshape_batch(x, (-1, -1, 2), (-1, 2, -1), batched=True).shape == (1, 3, 2, 5)
    with pytest.raises(ValueError, match="different numbers of variable dimensions"):
        reshape_batch(x, (-1, 5, 2), (-1, 2, -1), batched=True)
