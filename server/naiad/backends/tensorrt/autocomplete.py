"""Filling a model configuration from the engine, by Triton's tensorrt auto-complete rules.

A plan knows its tensors' names, types and shapes, so, as with ONNX, a ``config.pbtxt`` may leave them
out.  The rules:

* a config that already lists inputs and outputs keeps them;
* if every tensor has a dynamic dim 0 the engine batches: ``max_batch_size`` 0 becomes the largest
  batch profile 0 accepts, and a model that batches gets ``dynamic_batching {}`` when it has no
  scheduler (Triton's tensorrt backend does the same);
* an engine that cannot batch while the config sets ``max_batch_size`` fails with ``autofill failed``;
* dims drop dim 0 when batching; a tensor left with no dims becomes ``dims: [1]``, with
  ``reshape { shape: [] }`` when batching.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from naiad.backends.framework import complete_batching, complete_io
from naiad.backends.tensorrt.profiles import max_batch
from naiad.backends.tensorrt.tensors import EngineTensor

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

PLATFORM = "tensorrt_plan"


def complete(config: mc.ModelConfig, tensors: Sequence[EngineTensor]) -> None:
    """Fill ``config`` in place from the engine's ``tensors``."""
    if not config.platform:
        config.platform = PLATFORM
    inputs = [t for t in tensors if t.is_input]
    complete_batching(config, tensors, config.name, max_batch(inputs, [0]))
    if not config.input:
        complete_io(config.input, inputs, config.max_batch_size, config.name)
    if not config.output:
        complete_io(config.output, [t for t in tensors if not t.is_input], config.max_batch_size, config.name)
