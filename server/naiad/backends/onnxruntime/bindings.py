"""How each configured tensor maps onto a tensor of the ONNX model, checked when an instance loads.

A config that disagrees with its model must fail at load with a message naming the tensor, not at
the first request with an ORT error; the checks and their wording are Triton's onnxruntime backend's
(``ValidateInputs``/``ValidateOutputs``).  What survives the checks is a :class:`Binding` per tensor,
which tells ``execute`` the shape the model wants for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from naiad.backends.framework import TensorBinding
from naiad.backends.onnxruntime.tensors import ModelTensor
from naiad.core import datatypes
from naiad.core.errors import InternalError, InvalidArgumentError


@dataclass(frozen=True, slots=True)
class Binding(TensorBinding):
    """One tensor as clients see it (``dims``) and, when different, as the model sees it.

    ``model_dims`` is the config ``reshape``, or ``()`` for a model scalar configured as ``[1]``;
    ``None`` means the model takes ``dims`` as they are.  A ``ragged`` input is fed flattened.
    """

    ragged: bool = False


def _shape(dims: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _datatype(data_type: mc.DataType.ValueType) -> str:
    return datatypes.config_to_protocol(mc.DataType.Name(data_type))


class _Checker:
    """The load-time checks for one model; holds what every message needs."""

    def __init__(self, config: mc.ModelConfig) -> None:
        self.name: str = config.name
        self.max_batch_size: int = config.max_batch_size

    def fail(self, detail: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"unable to load model '{self.name}', {detail}")

    def tensor_fail(self, tensor: ModelTensor, detail: str) -> InvalidArgumentError:
        """The ONNX Runtime backend's shape checks' words (``CompareDimsSupported``)."""
        return InvalidArgumentError(f"model '{self.name}', tensor '{tensor.name}': {detail}")

    def check_type(self, kind: str, io_name: str, datatype: str, tensor: ModelTensor) -> None:
        if tensor.datatype != datatype:
            raise self.fail(
                f"configuration expects datatype {datatypes.CONFIG_TYPE[datatype]} for {kind} "
                f"'{io_name}', model provides {tensor.config_type}"
            )

    def model_dims(self, tensor: ModelTensor, dims: tuple[int, ...]) -> tuple[int, ...] | None:
        """Check config ``dims`` (or reshape) against the model; return the scalar reshape if any."""
        shape = tensor.shape
        batching = self.max_batch_size > 0
        if batching and not tensor.can_batch():
            raise self.tensor_fail(
                tensor,
                "for the model to support batching the shape should have at least 1 dimension and the "
                f"first dimension must be -1; but shape expected by the model is {_shape(shape)}",
            )
        debatched = shape[1:] if batching else shape
        if not debatched and dims and all(d == 1 for d in dims):
            return ()
        if not debatched and not batching:
            raise self.fail(
                f"scalar tensor '{tensor.name}', should only provide 1 in the model configuration "
                "when the model doesn't support batching. Model configuration provided: "
                f"{_shape(dims)}."
            )
        if len(debatched) != len(dims) or any(m not in (-1, d) for m, d in zip(debatched, dims, strict=True)):
            expects = f"the model expects {len(shape)} dimensions (shape {_shape(shape)}) but the model"
            expects += " configuration"
            if batching:
                full = (-1, *dims)
                raise self.tensor_fail(
                    tensor,
                    f"{expects} specifies {len(full)} dimensions (an initial batch dimension because "
                    "max_batch_size > 0 followed by the explicit tensor shape, making complete shape "
                    f"{_shape(full)})",
                )
            given = f"specifies {len(dims)} dimensions (shape {_shape(dims)})"
            raise self.tensor_fail(tensor, f"{expects} {given}")
        return None

    def bind(
        self, kind: str, io: mc.ModelInput | mc.ModelOutput, tensor: ModelTensor, ragged: bool = False
    ) -> Binding:
        datatype = _datatype(io.data_type)
        self.check_type(kind, io.name, datatype, tensor)
        dims = tuple(io.dims)
        reshape = tuple(io.reshape.shape) if io.HasField("reshape") else None
        if ragged:
            if tensor.shape != (-1,):
                raise self.fail(
                    "configuration expects model provides input with shape [-1]  for ragged input "
                    f"'{io.name}', model provides {_shape(tensor.shape)}"
                )
            return Binding(io.name, datatype, dims, ragged=True)
        scalar = self.model_dims(tensor, reshape if reshape is not None else dims)
        return Binding(io.name, datatype, dims, scalar if scalar is not None else reshape)

    def bind_control(self, name: str, datatype: str, tensor: ModelTensor | None) -> Binding:
        if tensor is None:
            raise InternalError(
                f"configuration specified sequence control '{name}', but model does not provide that input"
            )
        debatched = tensor.shape[1:] if self.max_batch_size > 0 else tensor.shape
        if debatched != (1,):
            raise self.fail(
                f"sequence control '{name}' in model has dims {_shape(debatched)} but dims [1] is expected"
            )
        if tensor.datatype != datatype:
            raise self.fail(
                f"sequence control '{name}', the model expects data-type {tensor.ort_type} but the "
                f"model configuration specifies data-type {datatypes.CONFIG_TYPE[datatype]}"
            )
        return Binding(name, datatype, (1,))


def _control_datatype(control: Any) -> str:
    if control.int32_false_true:
        return "INT32"
    if control.fp32_false_true:
        return "FP32"
    if control.bool_false_true:
        return "BOOL"
    return _datatype(control.data_type)


def _missing(kind: str, name: str, allowed: dict[str, ModelTensor]) -> InvalidArgumentError:
    names = ", ".join(sorted(allowed))
    return InvalidArgumentError(f"unexpected inference {kind} '{name}', allowed {kind}s are: {names}")


def bind_inputs(
    config: mc.ModelConfig, inputs: dict[str, ModelTensor], initializers: dict[str, ModelTensor]
) -> dict[str, Binding]:
    """Bindings for the config's inputs, sequence controls and states; the checks Triton makes."""
    checker = _Checker(config)
    sequence = config.sequence_batching
    controls = [(c.name, _control_datatype(k)) for c in sequence.control_input for k in c.control]
    expected = sum(not io.optional for io in config.input) + len(controls) + len(sequence.state)
    expected += len(config.batch_input)  # (as Triton counts: entries, not their target names)
    if len(inputs) != expected:
        raise checker.fail(f"configuration expects {expected} inputs, model provides {len(inputs)}")
    allowed = {**inputs, **initializers}
    bindings: dict[str, Binding] = {}
    for io in config.input:
        if io.optional and config.max_batch_size != 0:
            raise checker.fail(
                f"optional input '{io.name}' is not supported for models that support batching"
            )
        tensor = allowed.get(io.name)
        if tensor is None:
            raise _missing("input", io.name, allowed)
        bindings[io.name] = checker.bind("input", io, tensor, ragged=io.allow_ragged_batch)
    for name, datatype in controls:
        bindings[name] = checker.bind_control(name, datatype, allowed.get(name))
    for state in sequence.state:
        tensor = allowed.get(state.input_name)
        if tensor is None:
            raise _missing("input", state.input_name, allowed)
        bindings[state.input_name] = _state_binding(checker, "input", state.input_name, state, tensor)
    for batch_input in config.batch_input:  # computed per call (naiad.backends.batch_io), never sent
        for target in batch_input.target_name:
            if target not in inputs:
                raise _missing("input", target, allowed)
    return bindings


def bind_outputs(config: mc.ModelConfig, outputs: dict[str, ModelTensor]) -> dict[str, Binding]:
    """Bindings for the config's outputs and sequence state outputs."""
    checker = _Checker(config)
    bindings: dict[str, Binding] = {}
    scattered = {name for batch_output in config.batch_output for name in batch_output.target_name}
    for io in config.output:
        tensor = outputs.get(io.name)
        if tensor is None:
            raise _missing("output", io.name, outputs)
        if io.name in scattered:  # its shape is its requests' source inputs', whatever the model's
            datatype = _datatype(io.data_type)
            checker.check_type("output", io.name, datatype, tensor)
            bindings[io.name] = Binding(io.name, datatype, tuple(io.dims))
            continue
        bindings[io.name] = checker.bind("output", io, tensor)
    for state in config.sequence_batching.state:
        tensor = outputs.get(state.output_name)
        if tensor is None:
            raise _missing("output", state.output_name, outputs)
        bindings[state.output_name] = _state_binding(checker, "output", state.output_name, state, tensor)
    return bindings


def _state_binding(
    checker: _Checker, kind: str, name: str, state: mc.ModelSequenceBatching.State, tensor: ModelTensor
) -> Binding:
    datatype = _datatype(state.data_type)
    checker.check_type(kind, name, datatype, tensor)
    dims = tuple(state.dims)
    return Binding(name, datatype, dims, checker.model_dims(tensor, dims))
