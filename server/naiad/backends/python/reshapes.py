"""A Python model's config ``reshape``s, applied by the engine around the model.

Triton's core applies ``reshape`` for every backend: a model sees an input of ``dims`` in its ``reshape``
shape, and an output it makes in the ``reshape`` shape reaches the client in the ``dims`` shape (checked
with Triton 2.51: a Python model with input ``dims [4,4] reshape [16]`` sees ``[1,16]``, and its output
``dims [2,8] reshape [16]`` answers ``[1,2,8]``).  ONNX Runtime, PyTorch and TensorRT apply them
themselves (:mod:`naiad.backends.framework`); for a Python model its instance's host does, where the
model runs (in the engine, or in its model process), on the arrays' views (no copy), so the engine's
side of a model process sees what clients see.  Most models have none: their hosts hold ``None`` and
pay nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from naiad.backends.batching import reshape_batch
from naiad.backends.python.spec import ModelSpec
from naiad.core.request import Tensor

#: A tensor's name, config ``dims`` and ``reshape``.
TensorReshape = tuple[str, tuple[int, ...], tuple[int, ...]]


class Reshapes:
    """The ``reshape``s of one model's inputs and outputs."""

    __slots__ = ("_batched", "_inputs", "_outputs")

    def __init__(self, spec: ModelSpec) -> None:
        self._inputs = {name: (dims, reshape) for name, dims, reshape in spec.input_reshapes}
        self._outputs = {name: (dims, reshape) for name, dims, reshape in spec.output_reshapes}
        self._batched = spec.max_batch_size > 0

    @classmethod
    def of(cls, spec: ModelSpec) -> Reshapes | None:
        """The model's reshapes; ``None`` when its config has none."""
        return cls(spec) if spec.input_reshapes or spec.output_reshapes else None

    def inputs(self, tensors: Sequence[Tensor]) -> list[Tensor]:
        """``tensors`` as the model takes them: those of a reshaped input in their ``reshape`` shape."""
        return [self._moved(tensor, self._inputs.get(tensor.name), forward=True) for tensor in tensors]

    def outputs(self, tensors: Sequence[Tensor]) -> list[Tensor]:
        """The model's ``tensors`` as clients get them: those of a reshaped output in their ``dims``."""
        return [self._moved(tensor, self._outputs.get(tensor.name), forward=False) for tensor in tensors]

    def _moved(
        self, tensor: Tensor, shapes: tuple[tuple[int, ...], tuple[int, ...]] | None, forward: bool
    ) -> Tensor:
        if shapes is None:
            return tensor
        dims, reshape = shapes
        source, target = (dims, reshape) if forward else (reshape, dims)
        try:
            data = reshape_batch(tensor.data, source, target, self._batched)
        except ValueError:  # (only an output can: inputs were checked against their dims)
            # Triton's core gives such an output the config's shape all the same; its HTTP frontend
            # then refuses the answer in these words (its gRPC one sends an answer no client reads)
            message = f"output tensor shape does not match size of output for '{tensor.name}'"
            raise ValueError(message) from None
        return Tensor(tensor.name, tensor.datatype, data, tensor.parameters)
