"""Triton's batch inputs and batch outputs: tensors a framework backend adds to, or takes from, a batch.

A model fed ragged inputs (``allow_ragged_batch``: every request's tensor flattened and joined end to
end) cannot tell where one request's elements end unless it is told.  ``batch_input`` entries of the
config name extra model inputs the backend computes from the requests of each batch (element counts,
running totals, item shapes); ``batch_output`` entries name outputs produced for the joined elements,
which the backend cuts back per request in the shape of that request's source input.  Only the
backend sees them: clients neither send the batch inputs nor see them in the model's metadata.

What each kind holds, for the requests of one model call in batch order (Triton's backend library):

* ``BATCH_ELEMENT_COUNT``: each request's element count of the source input, shape ``[requests]``;
* ``BATCH_ACCUMULATED_ELEMENT_COUNT``: their running total, shape ``[requests]``;
* ``BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO``: 0 then the running total, shape ``[requests + 1]``;
* ``BATCH_MAX_ELEMENT_COUNT_AS_SHAPE``: only its shape speaks, ``[largest element count]``;
* ``BATCH_ITEM_SHAPE``: the source's shape without the batch dimension, once per batch item
  (a request of batch 2 counts twice), shape ``[items, rank - 1]``;
* ``BATCH_ITEM_SHAPE_FLATTEN``: the same, flattened.

``BATCH_SCATTER_WITH_INPUT_SHAPE``: request ``i`` gets the next elements of the output, shaped as the
output's config shape (with its batch dimension) whose ``-1`` take the sizes of request ``i``'s source
input at the same positions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

Array = np.ndarray[Any, Any]
Shape = tuple[int, ...]

_KIND = mc.BatchInput.Kind
ELEMENT_COUNT = _KIND.BATCH_ELEMENT_COUNT
ACCUMULATED = _KIND.BATCH_ACCUMULATED_ELEMENT_COUNT
ACCUMULATED_WITH_ZERO = _KIND.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO
ITEM_SHAPE = _KIND.BATCH_ITEM_SHAPE
ITEM_SHAPE_FLATTEN = _KIND.BATCH_ITEM_SHAPE_FLATTEN


@dataclass(frozen=True, slots=True)
class BatchInput:
    """One ``batch_input`` entry: the model inputs ``targets`` take what ``kind`` says of ``source``."""

    kind: int
    targets: tuple[str, ...]
    dtype: type[np.generic]
    source: str

    def value(self, shapes: Sequence[Shape]) -> Array:
        """The tensor for one model call whose requests' ``source`` inputs have ``shapes``."""
        kind = self.kind
        if kind == ITEM_SHAPE or kind == ITEM_SHAPE_FLATTEN:
            items = [shape[1:] for shape in shapes for _ in range(shape[0] if shape else 1)]
            rank = len(shapes[0]) - 1 if shapes else 0
            array = np.array(items, dtype=self.dtype).reshape(len(items), rank)
            return array.reshape(-1) if kind == ITEM_SHAPE_FLATTEN else array
        counts = [math.prod(shape) for shape in shapes]
        if kind == ELEMENT_COUNT:
            return np.array(counts, dtype=self.dtype)
        if kind == ACCUMULATED:
            return np.cumsum(counts).astype(self.dtype)
        if kind == ACCUMULATED_WITH_ZERO:
            return np.concatenate(([0], np.cumsum(counts))).astype(self.dtype)
        return np.zeros(max(counts, default=0), dtype=self.dtype)  # MAX_ELEMENT_COUNT_AS_SHAPE


@dataclass(frozen=True, slots=True)
class BatchOutput:
    """One ``batch_output`` entry: ``target``'s elements are scattered in the shapes of ``source``."""

    target: str
    source: str
    #: The output's config shape (``reshape`` if it has one), with a leading -1 for a batching model.
    template: Shape

    def scatter(self, array: Array, shapes: Sequence[Shape]) -> list[Array]:
        """``array``'s elements cut in request order, request ``i``'s in the template with each -1 the
        size of its source input's dimension at that position.  ``ValueError`` when the elements do
        not add up."""
        flat = array.reshape(-1)
        parts = []
        offset = 0
        for shape in shapes:
            try:
                own = tuple(shape[i] if dim == -1 else dim for i, dim in enumerate(self.template))
            except IndexError:
                raise ValueError(
                    f"batch output '{self.target}' has more dimensions than its source input '{self.source}'"
                ) from None
            size = math.prod(own)
            if offset + size > flat.size:
                raise ValueError(
                    f"batch output '{self.target}' has {flat.size} elements, fewer than its requests' "
                    f"source inputs '{self.source}' take"
                )
            parts.append(flat[offset : offset + size].reshape(own))
            offset += size
        return parts


@dataclass(frozen=True, slots=True)
class BatchIO:
    """A model's batch inputs and outputs (``BatchIO.of`` is ``None`` for a model with neither)."""

    inputs: tuple[BatchInput, ...]
    outputs: dict[str, BatchOutput]

    @classmethod
    def of(cls, config: mc.ModelConfig) -> BatchIO | None:
        if not config.batch_input and not config.batch_output:
            return None
        inputs = tuple(
            BatchInput(
                item.kind,
                tuple(item.target_name),
                np.int32 if item.data_type == mc.TYPE_INT32 else np.float32,
                item.source_input[0],
            )
            for item in config.batch_input
        )
        shapes = {
            io.name: tuple(io.reshape.shape if io.HasField("reshape") else io.dims) for io in config.output
        }
        batch = (-1,) if config.max_batch_size > 0 else ()
        outputs = {
            name: BatchOutput(name, item.source_input[0], batch + shapes[name])
            for item in config.batch_output
            for name in item.target_name
        }
        return cls(inputs, outputs)

    def sources(self) -> set[str]:
        """The inputs whose shapes the batch inputs and outputs read."""
        return {item.source for item in self.inputs} | {item.source for item in self.outputs.values()}
