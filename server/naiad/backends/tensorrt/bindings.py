"""Checking the configuration against the engine when an instance loads.

TensorRT binds tensors by name, so each configured tensor must be an engine tensor of the same type and
compatible shape; a batching config also needs the engine's profiles to accept its ``max_batch_size``.
A mismatch fails the load naming the tensor, rather than every request with a TensorRT error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from naiad.backends.framework import TensorBinding
from naiad.backends.tensorrt.profiles import max_batch
from naiad.backends.tensorrt.tensors import EngineTensor
from naiad.core import datatypes
from naiad.core.errors import InvalidArgumentError, UnsupportedError

#: TensorRT binds tensors by name, so a binding needs nothing beyond the shared record.
Binding = TensorBinding

Bindings = dict[str, Binding]


def bind(
    config: mc.ModelConfig, tensors: Sequence[EngineTensor], profiles: Sequence[int]
) -> tuple[Bindings, Bindings]:
    """``(inputs, outputs)`` bindings for the config, checked against the engine's ``tensors``."""
    engine = {tensor.name: tensor for tensor in tensors}
    if config.batch_input or config.sequence_batching.control_input or config.sequence_batching.state:
        raise UnsupportedError(
            f"unable to load model '{config.name}': batch inputs and sequence controls or state are not "
            "supported by the tensorrt backend of this server yet"
        )
    inputs = {io.name: _bind(config, "input", io, engine) for io in config.input}
    outputs = {io.name: _bind(config, "output", io, engine) for io in config.output}
    missing = [t.name for t in tensors if t.is_input and t.name not in inputs]
    if missing:
        raise InvalidArgumentError(
            f"unable to load model '{config.name}', the engine's input(s) {', '.join(missing)} are not in "
            "the model configuration"
        )
    if config.max_batch_size > 0:
        supported = max_batch([t for t in tensors if t.is_input], profiles)
        if config.max_batch_size > supported:
            raise InvalidArgumentError(
                f"unable to load model '{config.name}', model configuration specified max-batch "
                f"{config.max_batch_size} but TensorRT engine only supports max-batch {supported}"
            )
    return inputs, outputs


def _bind(config: mc.ModelConfig, kind: str, io: Any, engine: dict[str, EngineTensor]) -> Binding:
    tensor = engine.get(io.name)
    if tensor is None or tensor.is_input != (kind == "input"):
        names = ", ".join(t.name for t in engine.values() if t.is_input == (kind == "input"))
        raise InvalidArgumentError(
            f"unable to load model '{config.name}', configuration specified {kind} '{io.name}', which is not "
            f"an {kind} of the engine (it has: {names})"
        )
    if io.is_shape_tensor or tensor.is_shape_tensor:
        raise UnsupportedError(
            f"unable to load model '{config.name}': shape tensor '{io.name}' is not supported by this "
            "server yet"
        )
    datatype = datatypes.config_to_protocol(mc.DataType.Name(io.data_type))
    if tensor.datatype != datatype:
        raise InvalidArgumentError(
            f"unable to load model '{config.name}', configuration expects datatype "
            f"{datatypes.CONFIG_TYPE[datatype]} for {kind} '{io.name}', model provides {tensor.config_type}"
        )
    dims = tuple(io.dims)
    reshape = tuple(io.reshape.shape) if io.HasField("reshape") else None
    model_dims = reshape if reshape is not None else dims
    engine_dims = tensor.shape
    if config.max_batch_size > 0:
        if not tensor.can_batch():
            raise InvalidArgumentError(
                f"unable to load model '{config.name}', model configuration supports batching but dim 0 of "
                f"{kind} '{io.name}' is not dynamic in the engine: {list(engine_dims)}"
            )
        engine_dims = engine_dims[1:]
    compatible = len(engine_dims) == len(model_dims) and all(
        e in (-1, d) for e, d in zip(engine_dims, model_dims, strict=True)
    )
    if not compatible:
        raise InvalidArgumentError(
            f"unable to load model '{config.name}', {kind} '{io.name}' dims {list(engine_dims)} in the "
            f"engine don't match model configuration dims {list(model_dims)}"
        )
    return Binding(io.name, datatype, dims, reshape)
