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

import logging
from typing import TYPE_CHECKING

from naiad.backends.framework import complete_batching, complete_io
from naiad.backends.onnxruntime.tensors import ModelTensor

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

#: Triton's ``--backend-config=onnxruntime,default-max-batch-size`` default.
DEFAULT_MAX_BATCH_SIZE = 4
PLATFORM = "onnxruntime_onnx"

log = logging.getLogger(__name__)


def needs_model(config: mc.ModelConfig) -> bool:
    """Whether auto-complete must read the model (Triton counts ``batch_input`` as inputs)."""
    return not ((config.input or config.batch_input) and config.output)


def fill_platform(config: mc.ModelConfig) -> None:
    """Triton reports ONNX models as platform ``onnxruntime_onnx`` whether or not the config said so."""
    if not config.platform:
        config.platform = PLATFORM


def complete(
    config: mc.ModelConfig,
    inputs: dict[str, ModelTensor],
    outputs: dict[str, ModelTensor],
    model_name: str,
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> None:
    """Fill ``config`` in place from the model's ``inputs`` and ``outputs``."""
    fill_platform(config)
    if not needs_model(config):
        return
    tensors = [*inputs.values(), *outputs.values()]
    if complete_batching(config, tensors, model_name, max(default_max_batch_size, 0)):
        log.warning(  # (Triton's words, its misspelling too: logs are grepped)
            "autofilled max_batch_size to %d for model '%s' since batching is supporrted but no "
            "max_batch_size is specified in model configuration. Must specify max_batch_size to utilize "
            "autofill with a larger max batch size",
            config.max_batch_size,
            model_name,
        )
    if not config.input and not config.batch_input:
        complete_io(config.input, inputs.values(), config.max_batch_size, model_name)
    if not config.output:
        complete_io(config.output, outputs.values(), config.max_batch_size, model_name)
