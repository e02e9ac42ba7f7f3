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
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from naiad.backends.tensorrt.profiles import max_batch
from naiad.backends.tensorrt.tensors import EngineTensor
from naiad.core import datatypes
from naiad.core.errors import InvalidArgumentError, UnsupportedError

PLATFORM = "tensorrt_plan"


def complete(config: Any, tensors: Sequence[EngineTensor]) -> None:
    """Fill ``config`` in place from the engine's ``tensors``."""
    if not config.platform:
        config.platform = PLATFORM
    inputs = [t for t in tensors if t.is_input]
    if all(t.can_batch() for t in tensors):
        if config.max_batch_size == 0:
            config.max_batch_size = max_batch(inputs, [0])
        has_scheduler = config.HasField("dynamic_batching") or config.HasField("sequence_batching")
        if config.max_batch_size > 1 and not has_scheduler:
            config.dynamic_batching.SetInParent()
    elif config.max_batch_size != 0:
        raise InvalidArgumentError(
            f"autofill failed for model '{config.name}': model does not support batching while non-zero "
            "max_batch_size is specified"
        )
    if config.input and config.output:
        return
    if not config.input:
        _complete_io(config, config.input, inputs)
    if not config.output:
        _complete_io(config, config.output, [t for t in tensors if not t.is_input])


def _complete_io(config: Any, section: Any, tensors: Sequence[EngineTensor]) -> None:
    for tensor in tensors:
        datatype = tensor.datatype
        if datatype is None:
            raise UnsupportedError(
                f"autofill failed for model '{config.name}': tensor '{tensor.name}' has type "
                f"{tensor.trt_type}, which this server cannot carry"
            )
        io = section.add()
        io.name = tensor.name
        io.data_type = mc.DataType.Value(datatypes.CONFIG_TYPE[datatype])
        dims = tensor.shape[1:] if config.max_batch_size > 0 else tensor.shape
        if dims:
            io.dims.extend(dims)
        else:
            io.dims.append(1)
            if config.max_batch_size > 0:
                io.reshape.SetInParent()
