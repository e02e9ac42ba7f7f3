"""The ``sequence_batching`` section of a model, read and checked once at load time.

Stateful models get their requests in sequences (a correlation ID, START on the first request, END on
the last), and the sequence batcher feeds them control tensors the model declares: START, END and
READY as a false/true pair of INT32, FP32 or BOOL values, CORRID as the correlation ID itself.  The
scheduler reads these on every request, so they are plain values and ready-made arrays here, not
protobuf fields, and a bad section fails the model's load with the reason rather than its requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from naiad.core import datatypes
from naiad.core.errors import InvalidArgumentError

Array = np.ndarray[Any, Any]

#: Triton's default ``max_sequence_idle_microseconds`` (the field's 0 means this).
DEFAULT_IDLE_US = 1_000_000

_KIND = mc.ModelSequenceBatching.Control
_BOOLEAN_KINDS = {
    _KIND.CONTROL_SEQUENCE_START: "START",
    _KIND.CONTROL_SEQUENCE_END: "END",
    _KIND.CONTROL_SEQUENCE_READY: "READY",
}
_CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")


def _frozen(array: Array) -> Array:
    array.flags.writeable = False
    return array


@dataclass(frozen=True, slots=True)
class BooleanControl:
    """START, END or READY: the tensor ``name`` holding ``values[flag]`` (shape [1], batched [1, 1])."""

    kind: str
    name: str
    datatype: str
    values: tuple[Array, Array]


@dataclass(frozen=True, slots=True)
class CorrelationControl:
    """CORRID: the tensor ``name`` holding the request's correlation ID as ``datatype``."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def tensor_data(self, correlation_id: int | str, model_name: str) -> Array:
        if self.datatype == "BYTES":
            array = np.empty(self.shape, dtype=np.object_)
            array.fill(str(correlation_id).encode())
            return array
        if isinstance(correlation_id, str):
            raise InvalidArgumentError(
                f"inference request to model '{model_name}' has string correlation ID "
                f"'{correlation_id}', but the model's CORRID control '{self.name}' is {self.datatype}"
            )
        dtype = datatypes.NUMPY_DTYPE[self.datatype]
        if not np.iinfo(dtype).min <= correlation_id <= np.iinfo(dtype).max:
            raise InvalidArgumentError(
                f"inference request to model '{model_name}' has correlation ID {correlation_id}, out "
                f"of range for the model's {self.datatype} CORRID control '{self.name}'"
            )
        return np.full(self.shape, correlation_id, dtype=dtype)


@dataclass(frozen=True, slots=True)
class ImplicitState:
    """A ``state`` entry: ``output_name`` of one request becomes ``input_name`` of the next.

    ``initial`` is what the first request of a sequence gets (zeros unless ``initial_state`` says
    otherwise), with the batch dimension when the model batches.
    """

    input_name: str
    output_name: str
    datatype: str
    initial: Array


@dataclass(frozen=True, slots=True)
class SequenceSettings:
    """What the sequence batcher needs to know about a model version.

    ``oldest`` picks Triton's oldest strategy (a dynamic batch of the oldest ready sequences of an
    instance) over direct (each sequence has a slot; a batch holds the ready slots).  ``slots`` is the
    number of sequences each instance holds at once; others wait in a backlog.  ``batch_size`` is the
    largest batch one execution takes.  Delays are in nanoseconds.
    """

    model_name: str
    batching: bool
    oldest: bool
    slots: int
    batch_size: int
    idle_ns: int
    max_queue_delay_ns: int
    minimum_slot_utilization: float
    preferred_batch_sizes: frozenset[int]
    controls: tuple[BooleanControl, ...]
    correlation: CorrelationControl | None
    states: tuple[ImplicitState, ...]


def _boolean_control(name: str, control: Any, batched: bool, model: str) -> BooleanControl:
    kind = _BOOLEAN_KINDS[control.kind]
    pairs = [
        ("INT32", np.int32, control.int32_false_true),
        ("FP32", np.float32, control.fp32_false_true),
        ("BOOL", np.bool_, control.bool_false_true),
    ]
    given = [(datatype, dtype, list(values)) for datatype, dtype, values in pairs if values]
    if len(given) != 1 or len(given[0][2]) != 2:
        raise InvalidArgumentError(
            f"sequence batching control {kind} of model '{model}' must specify exactly two values "
            "(false, true) in exactly one of int32_false_true, fp32_false_true or bool_false_true"
        )
    datatype, dtype, values = given[0]
    shape = (1, 1) if batched else (1,)
    arrays = (_frozen(np.full(shape, values[0], dtype)), _frozen(np.full(shape, values[1], dtype)))
    return BooleanControl(kind, name, datatype, arrays)


def _correlation_control(name: str, control: Any, batched: bool, model: str) -> CorrelationControl:
    type_name = mc.DataType.Name(control.data_type)
    if type_name not in _CORRID_TYPES:
        raise InvalidArgumentError(
            "unexpected control data type, expected TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32, "
            f"or TYPE_STRING for CONTROL_SEQUENCE_CORRID for {model}"
        )
    return CorrelationControl(name, datatypes.config_to_protocol(type_name), (1, 1) if batched else (1,))


def _state(state: Any, batched: bool, model: str) -> ImplicitState:
    datatype = datatypes.config_to_protocol(mc.DataType.Name(state.data_type))
    if datatype == "BYTES":
        raise InvalidArgumentError(
            f"implicit state '{state.input_name}' of model '{model}': TYPE_STRING states are not "
            "supported by this server yet"
        )
    if len(state.initial_state) > 1:
        raise InvalidArgumentError(
            f"initial_state field for state input '{state.input_name}' must contain exactly one or "
            f"zero element. Found '{len(state.initial_state)}' elements."
        )
    dims = [1 if d == -1 else d for d in state.dims]
    if state.initial_state:
        initial = state.initial_state[0]
        if initial.data_type != state.data_type:
            raise InvalidArgumentError(
                f"The data type used for 'initial_state' field of state '{state.input_name}' does not "
                "match the state data type."
            )
        if initial.WhichOneof("state_data") != "zero_data":
            raise InvalidArgumentError(
                f"initial_state of state '{state.input_name}' of model '{model}': only zero_data is "
                "supported by this server yet"
            )
        if len(initial.dims) != len(state.dims) or any(
            d != s and s != -1 for d, s in zip(initial.dims, state.dims, strict=True)
        ):
            raise InvalidArgumentError(
                f"'initial_state' dims for input name '{state.input_name}' don't match the 'state' "
                "dims description"
            )
        dims = list(initial.dims)
    shape = ([1] if batched else []) + dims
    return ImplicitState(
        state.input_name,
        state.output_name,
        datatype,
        _frozen(np.zeros(shape, dtype=datatypes.NUMPY_DTYPE[datatype])),
    )


def sequence_settings_of(config: Any) -> SequenceSettings:
    """The settings of a normalized ``ModelConfig`` with a ``sequence_batching`` section."""
    name = config.name
    section = config.sequence_batching
    batched = config.max_batch_size > 0
    batch_size = max(1, int(config.max_batch_size))
    controls: list[BooleanControl] = []
    correlation: CorrelationControl | None = None
    for control_input in section.control_input:
        for control in control_input.control:
            if control.kind == _KIND.CONTROL_SEQUENCE_CORRID:
                correlation = _correlation_control(control_input.name, control, batched, name)
            else:
                controls.append(_boolean_control(control_input.name, control, batched, name))
    oldest = section.WhichOneof("strategy_choice") == "oldest"
    slots = batch_size
    if oldest:
        strategy = section.oldest
        if strategy.max_candidate_sequences > 0:
            slots = int(strategy.max_candidate_sequences)
        preferred = frozenset(int(size) for size in strategy.preferred_batch_size)
        delay_us = int(strategy.max_queue_delay_microseconds)
        utilization = 0.0
    else:
        preferred = frozenset()
        delay_us = int(section.direct.max_queue_delay_microseconds)
        utilization = float(section.direct.minimum_slot_utilization)
    for size in preferred:
        if not 1 <= size <= batch_size:
            raise InvalidArgumentError(
                f"sequence batching preferred batch size must be in [1, {batch_size}] for {name}"
            )
    idle_us = int(section.max_sequence_idle_microseconds) or DEFAULT_IDLE_US
    return SequenceSettings(
        model_name=name,
        batching=batched,
        oldest=oldest,
        slots=slots,
        batch_size=batch_size,
        idle_ns=idle_us * 1000,
        max_queue_delay_ns=delay_us * 1000,
        minimum_slot_utilization=utilization,
        preferred_batch_sizes=preferred,
        controls=tuple(controls),
        correlation=correlation,
        states=tuple(_state(state, batched, name) for state in section.state),
    )
