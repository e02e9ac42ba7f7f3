"""Which argument of ``forward`` each configured input feeds, and which returned value each output is.

TorchScript keeps no tensor names, so Triton's PyTorch backend matches config names to the model by
convention, and so does this module, with the same precedence and messages:

* inputs named like ``forward``'s arguments go to those arguments (``FORWARD_ARGUMENT``);
* otherwise names of the form ``<name>__<index>`` give the position (``INPUT__0``, ``NAMED_INDEX``);
* otherwise inputs are passed in config order (``STRICT_CONFIG_ORDERING``, with a warning);
* a ``forward`` taking one ``Dict(str, Tensor)`` gets every input under its config name;
* outputs are ``<name>__<index>`` positions in the returned tuple, or else config order;
* ``batch_input`` targets, computed for each call, are arguments placed by the inputs' convention
  (after the inputs in config order when that is the convention);
* implicit sequence states (``sequence_batching.state``) are an input and an output each, at the
  positions their ``<name>__<index>`` names give, and need every input to follow that form too.

Everything here is checked when an instance loads, so a config that cannot work fails then, naming
the tensor, instead of failing every request.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from tritonclient.grpc import model_config_pb2 as mc

from naiad.backends.framework import TensorBinding
from naiad.backends.pytorch import tensors
from naiad.core import datatypes
from naiad.core.errors import InternalError, InvalidArgumentError, UnsupportedError

log = logging.getLogger("naiad.backends.pytorch")

_DELIMITER = "__"


@dataclass(frozen=True, slots=True)
class Binding(TensorBinding):
    """One configured tensor: ``dims`` as clients see it, ``model_dims`` (the config ``reshape``) as the
    model does when they differ, and its ``position`` among the arguments or returned values.

    ``position`` is keyword-only because the shared fields, ``model_dims``'s default included, come first.
    """

    position: int = field(kw_only=True)


def named_index(name: str) -> int | None:
    """The index of a ``<name>__<index>`` tensor name, or ``None`` when it does not follow the form.

    As in Triton, everything after the first ``__`` must be digits, and nothing at all reads as 0.
    """
    start = name.find(_DELIMITER)
    if start < 0:
        return None
    suffix = name[start + len(_DELIMITER) :]
    if suffix and not suffix.isdigit():
        return None
    return int(suffix) if suffix else 0


def bind_inputs(
    config: mc.ModelConfig, arguments: tuple[str, ...] | None, dict_input: bool
) -> dict[str, Binding]:
    """Bindings for the config's inputs and sequence controls.

    ``arguments`` are ``forward``'s argument names without ``self`` (``None`` for a format that keeps
    none, such as an AOTInductor package); ``dict_input`` says ``forward`` takes one dictionary.
    """
    model = config.name
    states = config.sequence_batching.state
    controls = _controls(config)
    targets = _batch_input_targets(config)
    expected = len(config.input) + len(controls) + len(states) + len(targets)
    if arguments is not None and not dict_input and len(arguments) != expected:
        raise InvalidArgumentError(
            f"unable to load model '{model}', configuration expects {expected} inputs, model provides "
            f"{len(arguments)}"
        )
    if not config.input:  # (after the count, as Triton's backend checks them)
        raise InternalError("model configuration must contain at least one input, none were specified.")
    positions = _input_positions(config, arguments, dict_input)
    bindings: dict[str, Binding] = {}
    for io, position in zip(config.input, positions, strict=True):
        if io.optional and not dict_input:
            raise UnsupportedError(
                f"unable to load model '{model}': optional input '{io.name}' needs a model whose forward "
                "takes a single Dict(str, Tensor)"
            )
        bindings[io.name] = _bind(model, "input", io, position, config.max_batch_size)
    for offset, (name, datatype) in enumerate(controls):
        index = named_index(name)
        if index is None:
            raise InternalError(f"input '{name}' does not follow <name>__<index> naming convention.")
        if not tensors.supported(datatype):
            raise InternalError(
                f"input '{name}' type '{datatypes.CONFIG_TYPE[datatype]}' is not supported by PyTorch."
            )
        position = len(config.input) + offset if dict_input else index
        bindings[name] = Binding(name, datatype, (1,), position=position)
    for offset, (name, datatype) in enumerate(targets):
        bindings[name] = Binding(
            name, datatype, (-1,), position=_target_position(config, name, offset, arguments, dict_input)
        )
    if states:
        if dict_input or positions != [named_index(io.name) for io in config.input]:
            raise InvalidArgumentError(
                f"PyTorch model '{model}' is using sequence batching with state but not all inputs and "
                "outputs follow the <name>__<index> naming convention. "
            )
        for state in states:
            bindings[state.input_name] = _bind_state(config, state.input_name, state)
    if not dict_input:
        _check_positions(model, bindings, expected)
    return bindings


def _batch_input_targets(config: mc.ModelConfig) -> list[tuple[str, str]]:
    """``(name, datatype)`` of each tensor a ``batch_input`` entry computes for every call
    (:mod:`naiad.backends.batch_io`): arguments of ``forward`` that no client sends."""
    return [
        (target, datatypes.config_to_protocol(mc.DataType.Name(batch_input.data_type)))
        for batch_input in config.batch_input
        for target in batch_input.target_name
    ]


def _target_position(
    config: mc.ModelConfig, name: str, offset: int, arguments: tuple[str, ...] | None, dict_input: bool
) -> int:
    """Where a batch input goes among ``forward``'s arguments, by the convention the config's inputs
    follow (Triton's): the argument of its name, its ``<name>__<index>``, or after the inputs, in
    config order.  Unlike Triton, a name the convention cannot place fails the load, naming it."""
    if dict_input:
        return len(config.input) + offset
    names = [io.name for io in config.input]
    if arguments is not None and all(n in arguments for n in names):
        if name not in arguments:
            raise InvalidArgumentError(
                f"unable to load model '{config.name}': batch input '{name}' is not an argument of the "
                f"model's forward ({', '.join(arguments)})"
            )
        return arguments.index(name)
    if all(named_index(n) is not None for n in names):
        index = named_index(name)
        if index is None:
            raise InvalidArgumentError(
                f"unable to load model '{config.name}': batch input '{name}' does not follow the "
                "<name>__<index> naming convention its inputs follow"
            )
        return index
    return len(config.input) + offset


def _bind_state(config: mc.ModelConfig, name: str, state: mc.ModelSequenceBatching.State) -> Binding:
    """An implicit state's input or output: Triton's PyTorch backend takes its position from its name
    alone (``<name>__<index>``), whatever convention the other tensors follow."""
    index = named_index(name)
    if index is None:
        raise InvalidArgumentError(
            f"PyTorch model '{config.name}' is using sequence batching with state but state '{name}' does "
            "not follow the <name>__<index> naming convention. "
        )
    config_type = mc.DataType.Name(state.data_type)
    datatype = datatypes.config_to_protocol(config_type)
    if not tensors.supported(datatype):
        raise InternalError(
            f"unsupported datatype {config_type} for state '{name}' for model '{config.name}'"
        )
    if datatype == "BYTES" and len(state.dims) + (1 if config.max_batch_size > 0 else 0) > 1:
        raise InternalError(
            f"Triton only supports 1 dimensional List of String as state for '{name}' for model "
            f"'{config.name}'"
        )
    return Binding(name, datatype, tuple(state.dims), position=index)


def bind_outputs(config: mc.ModelConfig) -> dict[str, Binding]:
    """Bindings for the config's outputs: positions in what ``forward`` returns."""
    model = config.name
    if not config.output:
        raise InternalError("model configuration must contain at least one output, none were specified.")
    parsed = [named_index(io.name) for io in config.output]
    indices = [index for index in parsed if index is not None]
    if len(indices) != len(parsed):
        log.warning(
            "output '%s' or previous output(s) of the model '%s' do not follow the <name>__<index> naming "
            "convention. Falling back to enforcing strict ordering from model configuration.",
            config.output[parsed.index(None)].name,
            model,
        )
        indices = list(range(len(parsed)))
    bindings = {
        io.name: _bind(model, "output", io, index, config.max_batch_size)
        for io, index in zip(config.output, indices, strict=True)
    }
    for state in config.sequence_batching.state:
        bindings[state.output_name] = _bind_state(config, state.output_name, state)
    return bindings


def _input_positions(
    config: mc.ModelConfig, arguments: tuple[str, ...] | None, dict_input: bool
) -> list[int]:
    names = [io.name for io in config.input]
    if dict_input:
        return list(range(len(names)))
    if arguments is not None and all(name in arguments for name in names):
        return [arguments.index(name) for name in names]
    parsed = [named_index(name) for name in names]
    indices = [index for index in parsed if index is not None]
    if len(indices) == len(parsed):
        return indices
    log.warning(
        "input '%s' or previous input(s) are neither an input argument to the model '%s' nor do they "
        "follow the <name>__<index> naming convention. Falling back to enforcing strict ordering from "
        "model configuration.",
        names[parsed.index(None)],
        config.name,
    )
    return list(range(len(names)))


def _check_positions(model: str, bindings: dict[str, Binding], count: int) -> None:
    """Positional arguments must be exactly 0..count-1, or there is no call to make."""
    positions = sorted(binding.position for binding in bindings.values())
    if positions != list(range(count)):
        raise InvalidArgumentError(
            f"unable to load model '{model}', input indices {positions} do not name each of the model's "
            f"{count} arguments exactly once"
        )


def _bind(
    model: str, kind: str, io: mc.ModelInput | mc.ModelOutput, position: int, max_batch_size: int
) -> Binding:
    config_type = mc.DataType.Name(io.data_type)
    datatype = datatypes.config_to_protocol(config_type)
    if not tensors.supported(datatype):
        raise InternalError(f"unsupported datatype {config_type} for {kind} '{io.name}' for model '{model}'")
    dims = tuple(io.dims)
    reshape = tuple(io.reshape.shape) if io.HasField("reshape") else None
    if datatype == "BYTES":
        model_dims = reshape if reshape is not None else dims
        if len(model_dims) + (1 if max_batch_size > 0 else 0) > 1:
            raise InternalError(
                f"Triton only supports 1 dimensional List of String as {kind} for '{io.name}' for model "
                f"'{model}'"
            )
    return Binding(io.name, datatype, dims, reshape, position=position)


def _controls(config: mc.ModelConfig) -> list[tuple[str, str]]:
    """``(name, datatype)`` of each sequence control input, which the sequence batcher fills."""
    controls: list[tuple[str, str]] = []
    for control_input in config.sequence_batching.control_input:
        for control in control_input.control:
            if control.int32_false_true:
                datatype = "INT32"
            elif control.fp32_false_true:
                datatype = "FP32"
            elif control.bool_false_true:
                datatype = "BOOL"
            else:
                datatype = datatypes.config_to_protocol(mc.DataType.Name(control.data_type))
            controls.append((control_input.name, datatype))
    return controls
