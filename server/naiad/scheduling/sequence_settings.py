"""The ``sequence_batching`` section of a model, read and checked once at load time.

Stateful models get their requests in sequences (a correlation ID, START on the first request, END on
the last), and the sequence batcher feeds them control tensors the model declares: START, END and
READY as a false/true pair of INT32, FP32 or BOOL values, CORRID as the correlation ID itself.  The
scheduler reads these on every request, so they are plain values and ready-made arrays here, not
protobuf fields, and a bad section fails the model's load with the reason rather than its requests.
For the same reason an implicit state's ``initial_state`` (zeros, or the raw contents of a file in the
model's ``initial_state`` folder) is read once, here, into the array every new sequence starts from.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from naiad.codecs import bytes_tensor
from naiad.core import datatypes
from naiad.core.errors import InvalidArgumentError, request_prefix
from naiad.scheduling.policy import equal_inputs

Array = np.ndarray[Any, Any]

log = logging.getLogger("naiad.scheduling")

#: Where ``initial_state { data_file }`` files are, under the model's folder (Triton's name).
INITIAL_STATE_DIR = "initial_state"

#: Triton's default ``max_sequence_idle_microseconds`` (the field's 0 means this).
DEFAULT_IDLE_US = 1_000_000

_KIND = mc.ModelSequenceBatching.Control
_BOOLEAN_KINDS = {
    _KIND.CONTROL_SEQUENCE_START: "START",
    _KIND.CONTROL_SEQUENCE_END: "END",
    _KIND.CONTROL_SEQUENCE_READY: "READY",
}


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

    def check(self, correlation_id: int | str, model_name: str, request_id: str) -> None:
        """Triton's check of a request's correlation ID against the control, before it is queued: a
        string ID needs a ``TYPE_STRING`` control, an integer one an integer control, in Triton's
        words; and (Naiad's own check) an integer ID must fit the control's type."""
        if isinstance(correlation_id, str):
            given = "BYTES" if self.datatype != "BYTES" else ""
        else:
            given = "UINT64" if self.datatype not in ("UINT64", "INT64", "UINT32", "INT32") else ""
        if given:
            raise InvalidArgumentError(
                f"{request_prefix(request_id)}sequence batching control '{self.name}' data-type is "
                f"'{given}', but model '{model_name}' expects '{self.datatype}'"
            )
        self.tensor_data(correlation_id, model_name)

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
        limits = datatypes.integer_range(dtype)
        if not limits.min <= correlation_id <= limits.max:
            raise InvalidArgumentError(
                f"inference request to model '{model_name}' has correlation ID {correlation_id}, out "
                f"of range for the model's {self.datatype} CORRID control '{self.name}'"
            )
        return np.full(self.shape, correlation_id, dtype=dtype)


@dataclass(frozen=True, slots=True)
class ImplicitState:
    """A ``state`` entry: ``output_name`` of one request becomes ``input_name`` of the next.

    ``initial`` is what the first request of a sequence gets (zeros, empty strings for BYTES, unless
    ``initial_state`` names a ``data_file``), with the batch dimension when the model batches.
    """

    input_name: str
    output_name: str
    datatype: str
    initial: Array
    #: Whether the config also declares ``output_name`` an output, which clients may then ask for
    #: (as in Triton, a state's output is otherwise the sequence's alone).
    returned: bool = False


@dataclass(frozen=True, slots=True)
class SequenceSettings:
    """What the sequence batcher needs to know about a model version.

    ``oldest`` picks Triton's oldest strategy (a dynamic batch of the oldest ready sequences of an
    instance) over direct (each sequence has a slot, and its requests sit at that batch position).
    ``slots`` is the number of sequences each instance holds at once; others wait in a backlog.
    ``batch_size`` is the largest batch one execution takes.  Delays are in nanoseconds.
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
    #: The inputs whose shapes (``shape_inputs``) or contents (``value_inputs``: shape tensors) must
    #: agree within a batch, as for the dynamic batcher (:func:`naiad.scheduling.policy.equal_inputs`).
    shape_inputs: frozenset[str] = frozenset()
    value_inputs: frozenset[str] = frozenset()
    #: ``iterative_sequence``: a sequence is one request, which the model may release for
    #: rescheduling to run again in a later batch (continuous batching), and needs no correlation ID.
    iterative: bool = False


def _boolean_control(name: str, control: mc.ModelSequenceBatching.Control, batched: bool) -> BooleanControl:
    """(The config was checked when the model was polled: one pair of values, two of them.)"""
    kind = _BOOLEAN_KINDS[control.kind]
    pairs: list[tuple[str, type[np.generic], Sequence[int | float | bool]]] = [
        ("INT32", np.int32, control.int32_false_true),
        ("FP32", np.float32, control.fp32_false_true),
        ("BOOL", np.bool_, control.bool_false_true),
    ]
    datatype, dtype, values = next((d, t, list(v)) for d, t, v in pairs if v)
    shape = (1, 1) if batched else (1,)
    arrays = (_frozen(np.full(shape, values[0], dtype)), _frozen(np.full(shape, values[1], dtype)))
    return BooleanControl(kind, name, datatype, arrays)


def _correlation_control(
    name: str, control: mc.ModelSequenceBatching.Control, batched: bool
) -> CorrelationControl:
    """(Its type, one of Triton's five, was checked when the model was polled.)"""
    type_name = mc.DataType.Name(control.data_type)
    return CorrelationControl(name, datatypes.config_to_protocol(type_name), (1, 1) if batched else (1,))


def _state(
    state: mc.ModelSequenceBatching.State, batched: bool, model: str, model_dir: Path
) -> ImplicitState:
    """One ``state`` entry, checked as Triton checks it, with the array its sequences start from."""
    datatype = datatypes.config_to_protocol(mc.DataType.Name(state.data_type))
    if len(state.initial_state) > 1:
        raise InvalidArgumentError(
            f"initial_state field for state input '{state.input_name}' must contain exactly one or "
            f"zero element. Found '{len(state.initial_state)}' elements."
        )
    dims = [1 if d == -1 else d for d in state.dims]
    data_file: str | None = None
    if state.initial_state:
        initial = state.initial_state[0]
        if initial.data_type != state.data_type:
            raise InvalidArgumentError(
                f"The data type used for 'initial_state' field of state '{state.input_name}' does not "
                "match the state data type."
            )
        if not initial.name:
            raise InvalidArgumentError(
                f"Field 'name' must be set when using initial_state for state input '{state.input_name}'."
            )
        if len(initial.dims) != len(state.dims) or any(
            d != s and s != -1 for d, s in zip(initial.dims, state.dims, strict=True)
        ):
            raise InvalidArgumentError(
                f"'initial_state' dims for input name '{state.input_name}' don't match the 'state' "
                "dims description"
            )
        if any(d < 0 for d in initial.dims):
            raise InvalidArgumentError(
                f"'initial_state' field for state input name '{state.input_name}' contains variable "
                "dimensions."
            )
        kind = initial.WhichOneof("state_data")
        if kind is None:
            raise InvalidArgumentError(
                f"initial_state setting expects state '{state.input_name}' to have state_data set"
            )
        if kind == "data_file":
            data_file = initial.data_file
        dims = list(initial.dims)
    shape = tuple(([1] if batched else []) + dims)
    if data_file is not None:
        initial_data = _read_initial_state(state.input_name, datatype, shape, model_dir, data_file, model)
    elif datatype == "BYTES":  # Triton's zero_data for strings: zero-length elements
        initial_data = np.full(shape, b"", dtype=np.object_)
    else:
        initial_data = np.zeros(shape, dtype=datatypes.NUMPY_DTYPE[datatype])
    return ImplicitState(state.input_name, state.output_name, datatype, _frozen(initial_data))


def _read_initial_state(
    input_name: str, datatype: str, shape: tuple[int, ...], model_dir: Path, data_file: str, model: str
) -> Array:
    """The ``data_file`` of an ``initial_state``: raw row-major bytes in ``<model>/initial_state/``.

    As in Triton, fixed-size elements are little-endian, and a file larger than the state takes its
    first bytes (logged here, since it is more often a file for another shape or type than intended).
    A STRING state's file holds length-prefixed strings (4-byte little-endian lengths).  Triton 2.51
    zeroes a string state's bytes before a sequence uses them, so there the file's size alone counts:
    4 bytes an element start as empty strings, any other size fails every request of a sequence.
    Here a file that holds the state's strings gives them, one of 4 bytes an element that does not
    gives empty strings as in Triton (NVIDIA's qa gives a string state the 4 bytes of an INT32 100),
    and any other fails the load.
    The name comes from the config, which may come from anyone who can write to the repository, so it
    must name a file inside that folder: no absolute path, no ``..``, no symlink out of it.
    """
    where = f"initial_state of state '{input_name}' of model '{model}'"
    folder = model_dir / INITIAL_STATE_DIR
    relative = PurePosixPath(data_file)
    if relative.is_absolute() or ".." in relative.parts:
        raise InvalidArgumentError(
            f"{where}: data_file '{data_file}' must be a path relative to the model's "
            f"'{INITIAL_STATE_DIR}' folder, without '..'"
        )
    path = folder / relative
    try:
        if not path.resolve().is_relative_to(folder.resolve()):
            raise InvalidArgumentError(
                f"{where}: data_file '{data_file}' leads out of the model's '{INITIAL_STATE_DIR}' folder"
            )
        content = path.read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        raise InvalidArgumentError(f"{where}: cannot read data_file '{data_file}': {exc}") from exc
    count = int(np.prod(shape, dtype=np.int64))
    if datatype == "BYTES":
        try:
            return bytes_tensor.deserialize(content, count, input_name).reshape(shape)
        except InvalidArgumentError as exc:
            if len(content) != 4 * count:
                raise InvalidArgumentError(f"{where}: data_file '{data_file}': {exc.message}") from exc
        log.warning(
            "%s: data_file '%s' does not hold %d strings; as in Triton, the state starts as %d empty strings",
            where,
            data_file,
            count,
            count,
        )
        return np.full(shape, b"", dtype=np.object_)
    expected = count * datatypes.ELEMENT_SIZE[datatype]
    if len(content) < expected:
        raise InvalidArgumentError(
            f"{where} expects {expected} bytes ({count} {datatype} elements), but data_file "
            f"'{data_file}' only has {len(content)} bytes"
        )
    if len(content) > expected:
        log.warning(
            "%s takes the first %d bytes (%d %s elements) of data_file '%s', which has %d",
            where,
            expected,
            count,
            datatype,
            data_file,
            len(content),
        )
    wire = np.frombuffer(content[:expected], dtype=datatypes.WIRE_DTYPE[datatype])
    return wire.astype(datatypes.NUMPY_DTYPE[datatype]).reshape(shape)


def sequence_settings_of(config: mc.ModelConfig, model_dir: Path) -> SequenceSettings:
    """The settings of a normalized ``ModelConfig`` with a ``sequence_batching`` section (its rules
    checked when the model was polled: :func:`naiad.repository.validation.validate_model_config`).

    ``model_dir`` is the model's folder (the parent of its version folders), where the
    ``initial_state`` folder holding ``data_file`` initial states is.
    """
    name = config.name
    section = config.sequence_batching
    batched = config.max_batch_size > 0
    batch_size = max(1, int(config.max_batch_size))
    controls: list[BooleanControl] = []
    correlation: CorrelationControl | None = None
    for control_input in section.control_input:
        for control in control_input.control:
            if control.kind == _KIND.CONTROL_SEQUENCE_CORRID:
                correlation = _correlation_control(control_input.name, control, batched)
            else:
                controls.append(_boolean_control(control_input.name, control, batched))
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
    idle_us = int(section.max_sequence_idle_microseconds) or DEFAULT_IDLE_US
    shape_inputs, value_inputs = equal_inputs(config)
    declared = {io.name for io in config.output}  # (a state's output may be one too)
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
        states=tuple(
            replace(state, returned=state.output_name in declared)
            for state in (_state(entry, batched, name, model_dir) for entry in section.state)
        ),
        iterative=section.iterative_sequence,
        shape_inputs=shape_inputs,
        value_inputs=value_inputs,
    )
