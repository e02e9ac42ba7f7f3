"""Triton's checks of a model configuration as a whole, in its words, before any version is read.

Triton validates a model's configuration when it polls the model (``ValidateModelConfig``, and with
``--strict-model-config`` its tensors: ``ValidateModelIOConfig``), so a bad section is reported for
what it is even when the model has no version folder yet, and a user fixing a config reads the same
sentence on either server (NVIDIA's ``qa/L0_model_config`` greps for them).  The scheduling sections
are also read again, into settings, when a version loads (:mod:`naiad.scheduling.policy`,
:mod:`naiad.scheduling.sequence_settings`); these checks run first, so their words are Triton's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from math import prod

from tritonclient.grpc import model_config_pb2 as mc

from naiad.core.errors import InvalidArgumentError
from naiad.scheduling.ensemble import Step, steps_of

_KIND = mc.ModelSequenceBatching.Control
_CORRID_TYPES = (mc.TYPE_UINT64, mc.TYPE_INT64, mc.TYPE_UINT32, mc.TYPE_INT32, mc.TYPE_STRING)


def validate_model_config(config: mc.ModelConfig) -> None:
    """The sections' rules, in Triton's order: an ensemble's platform and backend, dynamic
    batching, sequence batching, ensemble scheduling.  Run before defaults are filled (an ensemble
    may not set ``optimization``).  Raises :class:`InvalidArgumentError` with Triton's message."""
    name = config.name
    if config.platform == "ensemble" and config.backend:
        raise InvalidArgumentError(
            f"Ensemble model '{name}' must have platform type 'ensemble' and empty backend type"
        )
    if config.HasField("dynamic_batching"):
        _dynamic_batching(config.dynamic_batching, int(config.max_batch_size), name)
    if config.HasField("sequence_batching"):
        _sequence_batching(config.sequence_batching, int(config.max_batch_size), name)
    if config.platform == "ensemble":
        _ensemble(config)
    elif config.HasField("ensemble_scheduling"):
        raise InvalidArgumentError(
            f"ensemble scheduling cannot be set for model '{name}' whose platform is not ensemble"
        )
    for control in config.model_metrics.metric_control:  # (Triton's last check)
        _metric_control(control)


def _metric_control(control: mc.ModelMetrics.MetricControl) -> None:
    """A ``model_metrics`` entry names a family and gives it histogram buckets (an empty one would
    leave the histogram without bounds)."""
    if not control.HasField("metric_identifier"):
        raise InvalidArgumentError("metric control must specify 'metric_identifier'")
    if not control.metric_identifier.family:
        raise InvalidArgumentError("metric identifier must specify non-empty 'family'")
    if not control.HasField("histogram_options"):
        raise InvalidArgumentError("metric control must specify 'histogram_options'")
    if not control.histogram_options.buckets:
        raise InvalidArgumentError("histogram options must specify non-empty 'buckets'")


def _ensemble(config: mc.ModelConfig) -> None:
    name = config.name
    if not config.HasField("ensemble_scheduling"):
        raise InvalidArgumentError(
            f"ensemble scheduling must be set for ensemble {name} whose platform is ensemble"
        )
    if config.instance_group:
        raise InvalidArgumentError(f"instance group should not be specified for ensemble '{name}'")
    if config.HasField("optimization"):
        raise InvalidArgumentError(f"optimization should not be specified for ensemble '{name}'")
    if config.model_warmup:
        raise InvalidArgumentError(f"model_warmup can not be specified for ensemble '{name}'")
    check_graph(config, steps_of(config))


def validate_io(config: mc.ModelConfig) -> None:
    """Each input's and output's name, type, dims and reshape (Triton's ``ValidateIOShape``), then
    what only some platforms take (``ValidateModelInput``/``Output``): image formats of 3 dims, and
    shape tensors and non-linear formats for TensorRT alone."""
    batching = config.max_batch_size > 0
    for prefix, tensors in (("model input", config.input), ("model output", config.output)):
        for tensor in tensors:
            problem = _io_problem(tensor, batching)
            sentence = f"{prefix} {problem}" if problem else _platform_problem(tensor, config.platform)
            if sentence:
                raise InvalidArgumentError(f"{sentence} for {config.name}")


def _platform_problem(tensor: mc.ModelInput | mc.ModelOutput, platform: str) -> str:
    """Triton's sentence for a tensor its model's platform cannot take, or ""."""
    image = (mc.ModelInput.FORMAT_NHWC, mc.ModelInput.FORMAT_NCHW)
    if isinstance(tensor, mc.ModelInput) and tensor.format in image and len(tensor.dims) != 3:
        return "model input NHWC/NCHW require 3 dims"
    tensorrt = platform == "tensorrt_plan"
    if tensor.is_shape_tensor and not tensorrt:
        return "shape tensors are only supported for TensorRT platform"
    if tensor.is_non_linear_format_io:
        if not tensorrt:
            return "Non-linear IO format is only supported for the TensorRT platform"
        if len(tensor.dims) != 3:
            kind = "input" if isinstance(tensor, mc.ModelInput) else "output"
            return f"Non-linear IO format {kind} requires 3 dims"
    return ""


def _dynamic_batching(section: mc.ModelDynamicBatching, max_batch_size: int, name: str) -> None:
    for size in section.preferred_batch_size:
        if size <= 0:
            raise InvalidArgumentError(f"dynamic batching preferred size must be positive for {name}")
        if size > max_batch_size:
            raise InvalidArgumentError(
                f"dynamic batching preferred size must be <= max batch size for {name}"
            )
    levels = int(section.priority_levels)
    if levels:
        if not 1 <= section.default_priority_level <= levels:
            raise InvalidArgumentError(f"default priority level must be in range [1, {levels}] for {name}")
        if any(not 1 <= level <= levels for level in section.priority_queue_policy):
            raise InvalidArgumentError(
                f"priority queue policy must have priority level in range [1, {levels}] for {name}"
            )
    if section.preserve_ordering:
        if levels > 1:
            raise InvalidArgumentError(
                f"Only one priority level is allowed when 'preserve_ordering' is true for {name}"
            )
        policies = [section.default_queue_policy, *section.priority_queue_policy.values()]
        delay = mc.ModelQueuePolicy.DELAY
        if any(p.default_timeout_microseconds and p.timeout_action == delay for p in policies):
            raise InvalidArgumentError(
                "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true "
                f"for {name}"
            )


def _sequence_batching(section: mc.ModelSequenceBatching, max_batch_size: int, name: str) -> None:
    for kind in (_KIND.CONTROL_SEQUENCE_START, _KIND.CONTROL_SEQUENCE_END, _KIND.CONTROL_SEQUENCE_READY):
        for control in _controls(section, kind, name):
            given = (control.int32_false_true, control.fp32_false_true, control.bool_false_true)
            values = [v for v in given if v]
            label = _KIND.Kind.Name(kind)
            if not values:
                raise InvalidArgumentError(
                    "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
                    f"'bool_false_true' for {label} for {name}"
                )
            if len(values) > 1:
                raise InvalidArgumentError(
                    "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' "
                    f"and 'bool_false_true' for {label} for {name}"
                )
            if len(values[0]) != 2:
                field = next(
                    f
                    for f in ("int32_false_true", "fp32_false_true", "bool_false_true")
                    if getattr(control, f)
                )
                raise InvalidArgumentError(
                    f"sequence batching control '{field}' must have exactly 2 entries for {label} for {name}"
                )
    for control in _controls(section, _KIND.CONTROL_SEQUENCE_CORRID, name):
        if control.int32_false_true or control.fp32_false_true or control.bool_false_true:
            raise InvalidArgumentError(
                "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or "
                f"'bool_false_true' for CONTROL_SEQUENCE_CORRID for {name}"
            )
        if control.data_type not in _CORRID_TYPES:
            raise InvalidArgumentError(
                f"unexpected data type for control CONTROL_SEQUENCE_CORRID for {name}. Allowed data types "
                "are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
            )
    if section.HasField("oldest"):
        for size in section.oldest.preferred_batch_size:
            if size <= 0:
                raise InvalidArgumentError(
                    f"sequence batching preferred batch size must be positive for {name}"
                )
            if size > max_batch_size:
                raise InvalidArgumentError(
                    f"sequence batching preferred batch size must be <= max batch size for {name}"
                )
    if section.HasField("direct") and not 0.0 <= section.direct.minimum_slot_utilization <= 1.0:
        raise InvalidArgumentError(
            f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {name}"
        )


def _controls(
    section: mc.ModelSequenceBatching, kind: mc.ModelSequenceBatching.Control.Kind.ValueType, name: str
) -> list[mc.ModelSequenceBatching.Control]:
    """The controls of ``kind``, after Triton's checks of the control tensors: each named, no name
    twice, at most one tensor of the kind."""
    seen: set[str] = set()
    found: list[mc.ModelSequenceBatching.Control] = []
    for control_input in section.control_input:
        if not control_input.name:
            raise InvalidArgumentError(f"sequence batching control tensor must have a name for {name}")
        if control_input.name in seen:
            raise InvalidArgumentError(
                f"sequence batching control tensor '{control_input.name}' is specified for multiple control "
                f"kinds for {name}"
            )
        seen.add(control_input.name)
        for control in control_input.control:
            if control.kind == kind:
                if found:
                    raise InvalidArgumentError(
                        f"sequence batching specifies multiple {_KIND.Kind.Name(kind)} tensors for {name}"
                    )
                found.append(control)
    return found


def _io_problem(tensor: mc.ModelInput | mc.ModelOutput, batching: bool) -> str:
    """What is wrong with one tensor's declaration, in Triton's words after "model input", or ""."""
    if not tensor.name:
        return "must specify 'name'"
    named = f"'{tensor.name}' "
    if tensor.data_type == mc.TYPE_INVALID:
        return named + "must specify 'data_type'"
    if not tensor.dims:
        return named + "must specify 'dims'"
    has_reshape = tensor.HasField("reshape")
    reshape = list(tensor.reshape.shape)
    if has_reshape and not reshape and not batching:
        return named + "cannot have empty reshape for non-batching model as scalar tensors are not supported"
    if any(d < 1 and d != -1 for d in tensor.dims):
        return named + "dimension must be integer >= 1, or -1 to indicate a variable-size dimension"
    if not has_reshape:
        return ""
    if any(d < 1 and d != -1 for d in reshape):
        return named + "reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension"
    dims_size, reshape_size = _element_count(tensor.dims), _element_count(reshape)
    if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
        return named + "has different size for dims and reshape"
    if dims_size == -1:  # each run between variable-size dimensions must hold as many elements
        dims_runs, reshape_runs = _runs(tensor.dims), _runs(reshape)
        if len(dims_runs) != len(reshape_runs):
            return named + "has different number of variable-size dimensions for dims and reshape"
        if dims_runs != reshape_runs:
            return named + "has different size for dims and reshape"
    return ""


def _element_count(dims: Iterable[int]) -> int:
    """Elements of ``dims``: -1 when one is variable, 0 for no dims (Triton's ``GetElementCount``)."""
    values = list(dims)
    if not values:
        return 0
    if -1 in values:
        return -1
    return prod(values)


def _runs(dims: Iterable[int]) -> list[int]:
    """The element counts of the runs of fixed dimensions between variable-size ones."""
    runs, count = [], 1
    for dim in dims:
        if dim == -1:
            runs.append(count)
            count = 1
        else:
            count *= dim
    return [*runs, count]


def check_graph(config: mc.ModelConfig, steps: tuple[Step, ...]) -> None:
    """An ensemble's graph on its own (Triton's ``ValidateEnsembleSchedulingConfig`` after its
    section checks), plus a cycle check that names the steps: every step names a model and maps
    inputs and outputs, no tensor is written twice, every input is used, every output written."""
    name = config.name
    if not steps:
        raise InvalidArgumentError(f"must specify 'step' for ensemble '{name}'")
    writers: dict[str, Step] = {}
    for step in steps:
        for field, present in (("model_name", step.model_name), ("input_map", step.inputs)):
            if not present:
                raise InvalidArgumentError(
                    f"must specify '{field}' in step {step.index} of ensemble '{name}'"
                )
        if not step.outputs:
            raise InvalidArgumentError(f"must specify 'output_map' in step {step.index} of ensemble '{name}'")
        for _, tensor in step.outputs:
            if tensor in writers:
                raise InvalidArgumentError(
                    f"ensemble tensor '{tensor}' can appear in an output map only once for ensemble "
                    f"'{name}' step {step.index}"
                )
            writers[tensor] = step
    _check_flow(config, steps, writers)  # (first: Triton reports what a cycle leaves unwritten)
    _check_cycles(name, steps, writers)


def _check_cycles(name: str, steps: tuple[Step, ...], writers: Mapping[str, Step]) -> None:
    """A step that needs, through other steps, a tensor it writes itself can never run."""
    needs = {step.index: {writers[t].index for _, t in step.inputs if t in writers} for step in steps}
    state: dict[int, int] = {}  # 1: on the current path, 2: done

    def visit(index: int, path: list[int]) -> None:
        state[index] = 1
        for before in sorted(needs[index]):
            if state.get(before) == 1:
                loop = [*path[path.index(before) :], before]
                described = " -> ".join(f"step {i} ('{steps[i].model_name}')" for i in loop)
                raise InvalidArgumentError(
                    f"ensemble '{name}' has a cycle: {described} (each needs a tensor the next writes)"
                )
            if state.get(before) is None:
                visit(before, [*path, before])
        state[index] = 2

    for step in steps:
        if step.index not in state:
            visit(step.index, [step.index])


def _check_flow(config: mc.ModelConfig, steps: tuple[Step, ...], writers: Mapping[str, Step]) -> None:
    """Every input used, every output written from the inputs, no tensor written for nothing."""
    name = config.name
    readers: dict[str, list[Step]] = {}
    for step in steps:
        for _, tensor in step.inputs:
            readers.setdefault(tensor, []).append(step)
    inputs = {tensor.name for tensor in config.input}
    for io in config.input:
        if io.name not in readers:
            raise InvalidArgumentError(f"ensemble input '{io.name}' for ensemble {name}' is not used")
    available = set(inputs)
    pending = list(steps)
    progress = True
    while progress:
        progress = False
        for step in list(pending):
            if all(tensor in available for _, tensor in step.inputs):
                available.update(tensor for _, tensor in step.outputs)
                pending.remove(step)
                progress = True
    outputs = {tensor.name for tensor in config.output}
    for output in config.output:
        if output.name not in writers and output.name not in inputs:
            raise InvalidArgumentError(f"ensemble output '{output.name}' for ensemble {name}' is not used")
        if output.name not in available:
            missing = _first_missing(output.name, writers, available, inputs)
            detail = ""
            if missing is not None:
                source, step = missing
                detail = (
                    f": at least one of its depending tensors, '{source}', is not connected (it is an "
                    f"input of step {step.index}, model '{step.model_name}')"
                )
            raise InvalidArgumentError(f"output '{output.name}' for ensemble '{name}' is not written{detail}")
    for tensor, step in writers.items():
        if tensor not in outputs and tensor not in readers:
            raise InvalidArgumentError(
                f"ensemble tensor '{tensor}' is unused in ensemble '{name}' (written by step "
                f"{step.index}, model '{step.model_name}')"
            )


def _first_missing(
    tensor: str, writers: Mapping[str, Step], available: set[str], inputs: set[str]
) -> tuple[str, Step] | None:
    """Follow an unwritten tensor back to a step input that nothing writes."""
    seen: set[str] = set()
    while tensor in writers and tensor not in seen:
        seen.add(tensor)
        step = writers[tensor]
        for _, source in step.inputs:
            if source not in available:
                if source not in writers and source not in inputs:
                    return source, step
                tensor = source
                break
        else:
            return None
    return None
