"""Moving tensors between the per-request form clients send and the batched form a model runs.

A dynamic batcher hands a backend several requests at once; running them as one framework call is the
point of batching, so every framework backend (ONNX Runtime, torch, TensorRT) needs the same three
pieces of shape arithmetic, kept here in pure numpy so they are tested once:

* :func:`concat_batch` joins request tensors along dim 0 (or flattens them, for ragged inputs);
* :func:`split_batch` cuts a batched output back into one view per request, by batch size;
* :func:`reshape_batch` applies a config ``reshape`` (what the model sees) or undoes it (what clients
  see) while keeping any leading batch dimension.

BYTES tensors are numpy ``object_`` arrays; every function here works on them unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]


def concat_batch(arrays: Sequence[Array], ragged: bool = False) -> Array:
    """One batched tensor from the tensors of several requests, in request order.

    The requests were validated against the model configuration, so their non-batch dimensions
    agree; a ``ragged`` input (``allow_ragged_batch``) is instead flattened and joined end to end, which
    is the 1-D layout Triton gives models that accept ragged batches.  A single tensor is returned
    as-is (no copy), since most calls carry one request.
    """
    if not arrays:
        raise ValueError("concat_batch needs at least one tensor")
    if ragged:
        if len(arrays) == 1:
            return arrays[0].reshape(-1)
        return np.concatenate([a.reshape(-1) for a in arrays])
    if len(arrays) == 1:
        return arrays[0]
    first = arrays[0]
    for other in arrays[1:]:
        if other.shape[1:] != first.shape[1:]:
            raise ValueError(
                f"cannot batch tensors of shapes {list(first.shape)} and {list(other.shape)}: "
                "non-batch dimensions differ"
            )
    return np.concatenate(arrays, axis=0)


def split_batch(array: Array, sizes: Sequence[int]) -> list[Array]:
    """Views of ``array`` along dim 0, one per request, of ``sizes[i]`` rows each.

    Raises :class:`ValueError` when the model's output does not have exactly ``sum(sizes)`` rows,
    which means the model does not batch the way its configuration claims.
    """
    total = sum(sizes)
    if array.ndim == 0 or array.shape[0] != total:
        raise ValueError(
            f"output of shape {list(array.shape)} cannot be split into batches of {list(sizes)}: "
            f"expected {total} rows in dimension 0"
        )
    if len(sizes) == 1:
        return [array]
    bounds = np.cumsum(sizes)[:-1]
    return list(np.split(array, bounds, axis=0))


def reshape_batch(array: Array, source: Sequence[int], target: Sequence[int], batched: bool) -> Array:
    """``array`` (shaped ``[batch] + source`` or ``source``) reshaped to ``[batch] + target`` / ``target``.

    ``source`` and ``target`` are config shapes and may hold ``-1``.  As in Triton, the k-th variable
    dimension of ``target`` takes the actual size of the k-th variable dimension of ``source``, so a
    reshape with several ``-1`` (which numpy alone cannot resolve) is well defined.  Going from
    ``dims`` to ``reshape`` feeds the model; going back restores the shape clients expect.
    """
    actual = array.shape[1:] if batched else array.shape
    # (by position, as Triton's core reads them; a model's output need not have the rank it should)
    variable = [actual[index] for index, dim in enumerate(source) if dim == -1 and index < len(actual)]
    shape = list(target)
    wildcards = [i for i, dim in enumerate(shape) if dim == -1]
    if len(wildcards) == len(variable):
        for index, size in zip(wildcards, variable, strict=True):
            shape[index] = size
    elif len(wildcards) > 1:
        raise ValueError(
            f"cannot reshape {list(array.shape)} from {list(source)} to {list(target)}: "
            "the two shapes have different numbers of variable dimensions"
        )
    if batched and array.ndim:
        shape.insert(0, array.shape[0])
    try:
        return array.reshape(shape)
    except ValueError:
        raise ValueError(
            f"cannot reshape {list(array.shape)} from {list(source)} to {list(target)}: the element "
            "counts differ"
        ) from None
