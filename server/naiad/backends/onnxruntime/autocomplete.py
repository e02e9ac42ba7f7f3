"""Filling a model configuration from the ONNX file, by Triton's onnxruntime auto-complete rules.

Triton users drop a ``model.onnx`` into a repository, often with no ``config.pbtxt``, and expect it to
serve: names, datatypes and dims come from the model, and a model whose every tensor has a variable
dim 0 is taken to batch.  The rules (onnxruntime_backend ``AutoCompleteConfig``):

* a config that already lists inputs and outputs is left alone;
* if every input and output has a variable dim 0 and ``max_batch_size`` is 0, ``max_batch_size``
  becomes the backend's default (4); if ``max_batch_size`` > 1 and no scheduler is set,
  ``dynamic_batching {}`` is added;
* a model that cannot batch while the config sets ``max_batch_size`` fails with ``autofill failed``;
* dims drop dim 0 when batching; a tensor left with no dims becomes ``dims: [1]``, with
  ``reshape { shape: [] }`` when batching (Triton rejects an empty reshape without batching).
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from naiad.backends.onnxruntime.tensors import ModelTensor
from naiad.core import datatypes
from naiad.core.errors import InvalidArgumentError, UnsupportedError

#: Triton's ``--backend-config=onnxruntime,default-max-batch-size`` default.
DEFAULT_MAX_BATCH_SIZE = 4
PLATFORM = "onnxruntime_onnx"


def needs_model(config: Any) -> bool:
    """Whether auto-complete must read the model (Triton counts ``batch_input`` as inputs)."""
    return not ((config.input or config.batch_input) and config.output)


def fill_platform(config: Any) -> None:
    """Triton reports ONNX models as platform ``onnxruntime_onnx`` whether or not the config said so."""
    if not config.platform:
        config.platform = PLATFORM


def complete(
    config: Any,
    inputs: dict[str, ModelTensor],
    outputs: dict[str, ModelTensor],
    model_name: str,
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> None:
    """Fill ``config`` in place from the model's ``inputs`` and ``outputs``."""
    fill_platform(config)
    if not needs_model(config):
        return
    _complete_max_batch(config, inputs, outputs, model_name, default_max_batch_size)
    if not config.input and not config.batch_input:
        _complete_io(config.input, inputs, config.max_batch_size, model_name)
    if not config.output:
        _complete_io(config.output, outputs, config.max_batch_size, model_name)


def _complete_max_batch(
    config: Any,
    inputs: dict[str, ModelTensor],
    outputs: dict[str, ModelTensor],
    model_name: str,
    default_max_batch_size: int,
) -> None:
    tensors = [*inputs.values(), *outputs.values()]
    if all(tensor.can_batch() for tensor in tensors):
        if config.max_batch_size == 0:
            config.max_batch_size = max(default_max_batch_size, 0)
        has_scheduler = config.HasField("dynamic_batching") or config.HasField("sequence_batching")
        if config.max_batch_size > 1 and not has_scheduler:
            config.dynamic_batching.SetInParent()
    elif config.max_batch_size != 0:
        raise InvalidArgumentError(
            f"autofill failed for model '{model_name}': model does not support batching while "
            "non-zero max_batch_size is specified"
        )


def _complete_io(section: Any, tensors: dict[str, ModelTensor], max_batch_size: int, model_name: str) -> None:
    for tensor in tensors.values():
        datatype = tensor.datatype
        if datatype is None:
            raise UnsupportedError(
                f"autofill failed for model '{model_name}': tensor '{tensor.name}' has type "
                f"{tensor.ort_type}, which this server cannot carry"
            )
        io = section.add()
        io.name = tensor.name
        io.data_type = mc.DataType.Value(datatypes.CONFIG_TYPE[datatype])
        dims = tensor.shape[1:] if max_batch_size > 0 else tensor.shape
        if dims:
            io.dims.extend(dims)
        else:
            io.dims.append(1)
            if max_batch_size > 0:
                io.reshape.SetInParent()
