"""Ensembles in the repository: the load-time checks, the version object, and the step callback.

An ensemble version holds no instances: it is its graph (:mod:`naiad.scheduling.ensemble`) and the
models its steps name.  Its load checks what Triton checks, with Triton's messages, so that a broken
pipeline fails at load with a reason instead of at its first request:

* the graph itself: every step names a model and maps inputs and outputs, no ensemble tensor is
  written twice, no step depends on itself through other steps, every ensemble input is used and
  every ensemble output is written, and no intermediate tensor is left unused;
* against the step models' configurations: every mapped name exists, every required input is mapped,
  datatypes and shapes agree wherever two ends of a tensor meet, batch sizes fit;
* Triton's decoupled workflow check: each response of a decoupled step starts a new set of tensors
  (a *lineage*), so no step (and not the ensemble's outputs) may take tensors of two lineages, which
  could never be matched; the steps then fall into the scheduler's stages.  An ensemble with a
  decoupled step is decoupled itself, and its configuration says so (:func:`complete_config`).

The manager loads the step models first (they are the ensemble's dependencies); an ensemble then
serves only while every step model can: :class:`EnsembleVersion` reports UNAVAILABLE, naming the
missing step, while one cannot, and checks the graph again when a step model was reloaded with
another configuration.  A step model reloaded into, or out of, the decoupled policy holds it
UNAVAILABLE until the ensemble itself is loaded again: its stages and its own policy are fixed at load.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from naiad.core.errors import InvalidArgumentError
from naiad.core.map_order import unordered_map_order
from naiad.core.request import InferRequest, InferResponse
from naiad.core.verbose import prepared
from naiad.repository import config as cfg
from naiad.repository.loader import LoadPlan
from naiad.repository.model import Model, ModelState, ModelVersion, label_file
from naiad.repository.validation import check_graph
from naiad.scheduling.cache import ResponseCache, refuse_uncacheable
from naiad.scheduling.ensemble import EnsembleScheduler, Fit, Reshape, Stage, Step, StepRunner, steps_of
from naiad.scheduling.factory import first_response_bounds
from naiad.scheduling.stats import SchedulerStats

#: The registry's "which version runs this request" (``ModelRegistry.route``).
Resolver = Callable[[InferRequest], tuple[Model, ModelVersion]]

_READY = ModelState.READY

log = logging.getLogger("naiad.repository")


def is_ensemble(config: mc.ModelConfig) -> bool:
    return config.platform == "ensemble"


def step_runner(resolve: Resolver, cache: ResponseCache | None = None) -> StepRunner:
    """Run a step's request as a client's: the serving version, checked against its signature, and
    answered from the response cache when the step's model uses it (as Triton's ensembles do)."""

    async def run(request: InferRequest) -> InferResponse:
        model, version = resolve(request)
        signature = model.signature
        assert signature is not None
        batch = signature.validate(request)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(prepared(request, version.version, batch if signature.max_batch_size else 0))
        if cache is None or not model.caches_responses or version.scheduler is None:
            return await version.submit(request)
        stats = version.scheduler.stats
        return await cache.answer(request, model.key, version.version, stats, version.submit)

    return run


def dependency_failure(ensemble: str, dependency: str, message: str | None) -> str:
    """Why an ensemble did not load because a step model did not (Triton's wording); ``message`` is
    the step model's load error, ``None`` when no repository holds that model."""
    if message is None:
        return f"ensemble {ensemble} contains models that are not available or ambiguous: {dependency}"
    return (
        f"ensemble '{ensemble}' depends on '{dependency}' which has no loaded version. Model "
        f"'{dependency}' loading failed with error: {message.rstrip()}"
    )


# ---- the graph, on its own --------------------------------------------------------------------------


# ---- the graph against its step models -------------------------------------------------------------


class _Node:
    """What one end of an ensemble tensor says about it: its datatype and shape, and from where."""

    __slots__ = ("batched", "dims", "model", "type")

    def __init__(self, model: str, type: mc.DataType.ValueType, dims: list[int], batched: bool) -> None:
        self.model = model
        self.type = type
        self.dims = dims
        self.batched = batched

    @property
    def full_dims(self) -> list[int]:
        return ([-1] if self.batched else []) + self.dims


def _dims_match(left: list[int], right: list[int]) -> bool:
    return len(left) == len(right) and all(
        a == b or a == -1 or b == -1 for a, b in zip(left, right, strict=True)
    )


def _dims_text(dims: list[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _agree(known: _Node, other: _Node, prefix: str) -> None:
    """Triton's ``ValidateTensorConsistency``."""
    if known.type != other.type:
        raise InvalidArgumentError(
            f"{prefix}inconsistent data type: {mc.DataType.Name(known.type)} is inferred from model "
            f"{known.model} while {mc.DataType.Name(other.type)} is inferred from model {other.model}"
        )
    if not _dims_match(known.dims, other.dims) and not _dims_match(known.full_dims, other.full_dims):
        raise InvalidArgumentError(
            f"{prefix}inconsistent shape: {_dims_text(known.full_dims)} is inferred from model "
            f"{known.model} while {_dims_text(other.full_dims)} is inferred from model {other.model}"
        )


def _reshapes(tensors: Iterable[mc.ModelInput] | Iterable[mc.ModelOutput]) -> dict[str, Reshape]:
    return {
        tensor.name: (tuple(tensor.dims), tuple(tensor.reshape.shape))
        for tensor in tensors
        if tensor.HasField("reshape")
    }


def _io_dims(tensor: mc.ModelInput | mc.ModelOutput) -> list[int]:
    return list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)


def _check_step(ensemble: str, step: Step, config: mc.ModelConfig, nodes: dict[str, _Node]) -> None:
    """Triton's ``ValidateTensorMapping`` for one step."""
    model = step.model_name
    batched = config.max_batch_size > 0
    inputs = {tensor.name: tensor for tensor in config.input}
    outputs = {tensor.name: tensor for tensor in config.output}
    for model_input, tensor in step.inputs:
        if model_input not in inputs:
            raise InvalidArgumentError(
                f"in ensemble {ensemble}, ensemble tensor {tensor} is mapping to non-existing input "
                f"{model_input} in model {model}"
            )
    mapped = {model_input for model_input, _ in step.inputs}
    for spec in config.input:
        if spec.name not in mapped and not spec.optional:
            raise InvalidArgumentError(
                f"in ensemble {ensemble}, input {spec.name} in model {model} is not mapped to any "
                "ensemble tensors"
            )
    for model_input, tensor in step.inputs:
        input_spec = inputs[model_input]
        _meet(nodes, tensor, _Node(model, input_spec.data_type, list(input_spec.dims), batched), ensemble)
    for model_output, tensor in step.outputs:
        if model_output not in outputs:
            raise InvalidArgumentError(
                f"in ensemble {ensemble}, ensemble tensor {tensor} is mapped from non-existing output "
                f"{model_output} in model {model}"
            )
        output_spec = outputs[model_output]
        _meet(nodes, tensor, _Node(model, output_spec.data_type, list(output_spec.dims), batched), ensemble)


def _meet(nodes: dict[str, _Node], tensor: str, node: _Node, ensemble: str) -> None:
    known = nodes.get(tensor)
    if known is None:
        nodes[tensor] = node
    else:
        _agree(known, node, f"in ensemble {ensemble}, ensemble tensor {tensor}: ")


def _serving(model: Model | None, version: str) -> bool:
    if model is None:
        return False
    if not version:
        for mv in model.versions.values():
            if mv.state is _READY:
                return True
        return False
    chosen = model.versions.get(int(version))
    return chosen is not None and chosen.state is _READY


def _check_steps(
    config: mc.ModelConfig, steps: tuple[Step, ...], models: Mapping[str, Model]
) -> frozenset[int]:
    """The step models serve, and the graph's tensors agree with their configurations; the indices
    of the steps whose model is decoupled."""
    name = config.name
    batched = config.max_batch_size > 0
    nodes = {t.name: _Node(name, t.data_type, _io_dims(t), batched) for t in config.input}
    outputs = {t.name: _Node(name, t.data_type, _io_dims(t), batched) for t in config.output}
    decoupled: set[int] = set()
    for step in steps:
        problem = _unavailable(name, step, models)
        if problem:
            raise InvalidArgumentError(problem)
        step_config = models[step.model_name].config
        assert step_config is not None  # a model that serves has its configuration
        if step_config.model_transaction_policy.decoupled:
            decoupled.add(step.index)
        if 0 < step_config.max_batch_size < config.max_batch_size:
            raise InvalidArgumentError(
                f"ensemble {name} allows maximum batch size {config.max_batch_size}, but it contains "
                f"model {step.model_name} which only allows maximum batch size to be "
                f"{step_config.max_batch_size}"
            )
        _check_step(name, step, step_config, nodes)
    for tensor, node in outputs.items():
        if tensor in nodes:
            _agree(nodes[tensor], node, f"in ensemble {name}, ensemble tensor {tensor}: ")
    return frozenset(decoupled)


def _mixed(ensemble: str, model: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"in ensemble {ensemble}, step of model '{model}' receives inputs originated from different "
        "decoupled models"
    )


def _stages(config: mc.ModelConfig, steps: tuple[Step, ...], decoupled: frozenset[int]) -> tuple[Stage, ...]:
    """Triton's decoupled workflow check, and the stages the scheduler runs.

    Each tensor belongs to a lineage: the ensemble's inputs to lineage 0, a decoupled step's outputs
    to a new one (one set per response), any other step's outputs to its inputs' lineage.  A step
    taking tensors of two lineages, or outputs of two lineages, is refused with Triton's message.
    With the graph checks before, that leaves one chain of lineages (a lineage that does not lead to
    the outputs would hold an unused tensor): each lineage's steps, then the decoupled step fed by it.
    """
    name = config.name
    lineage = {tensor.name: 0 for tensor in config.input}
    members: dict[int, list[Step]] = {0: []}
    producers: dict[int, Step] = {}
    pending = list(steps)
    progress = True
    while progress:
        progress = False
        for step in list(pending):
            if any(tensor not in lineage for _, tensor in step.inputs):
                continue
            sources = {lineage[tensor] for _, tensor in step.inputs}
            if len(sources) > 1:
                raise _mixed(name, step.model_name)
            (source,) = sources
            produced = source
            if step.index in decoupled:
                produced = len(members)
                members[produced] = []
                producers[source] = step
            else:
                members[source].append(step)
            for _, tensor in step.outputs:
                lineage[tensor] = produced
            pending.remove(step)
            progress = True
    if len({lineage[tensor.name] for tensor in config.output}) > 1:
        raise _mixed(name, name)
    stages: list[Stage] = []
    head: int | None = 0
    while head is not None:
        producer = producers.get(head)
        stages.append(Stage(tuple(sorted(members[head], key=lambda step: step.index)), producer))
        head = None if producer is None else lineage[producer.outputs[0][1]]
    assert sum(len(stage.steps) + (stage.producer is not None) for stage in stages) == len(steps)
    return tuple(stages)


def _unavailable(ensemble: str, step: Step, models: Mapping[str, Model]) -> str:
    """Why ``step``'s model cannot serve the ensemble ("" when it can)."""
    model = models.get(step.model_name)
    if _serving(model, step.model_version):
        return ""
    if model is not None and step.model_version and _serving(model, ""):
        return (
            f"ensemble '{ensemble}' depends on '{step.model_name}' whose required version "
            f"{step.model_version} is not loaded."
        )
    return f"ensemble '{ensemble}' depends on '{step.model_name}' which has no loaded version."


def check_ensemble(
    config: mc.ModelConfig, models: Mapping[str, Model]
) -> tuple[tuple[Step, ...], tuple[Stage, ...]]:
    """The ensemble's steps and stages, after every load-time check; INVALID_ARG with the reason
    otherwise."""
    steps = steps_of(config)
    check_graph(config, steps)
    decoupled = _check_steps(config, steps, models)
    return steps, _stages(config, steps, decoupled)


def complete_config(plan: LoadPlan, models: Mapping[str, Model]) -> None:
    """Say in the ensemble's configuration whether it is decoupled: as Triton fills it, exactly when
    a step model is, whatever config.pbtxt said (so ``/config`` always shows the policy).  Done once the
    step models are loaded and before versions are built or kept, so that the model is served,
    streamed and reported consistently with its version's stages."""
    config = plan.config
    decoupled = any(
        (model := models.get(step.model_name)) is not None and model.decoupled
        for step in config.ensemble_scheduling.step
    )
    policy = config.model_transaction_policy
    if not config.HasField("model_transaction_policy") or policy.decoupled != decoupled:
        policy.SetInParent()
        policy.decoupled = decoupled
        plan.config_json = cfg.to_json(config)


# ---- the version ------------------------------------------------------------------------------------


class EnsembleVersion(ModelVersion):
    """A READY ensemble version reads as UNAVAILABLE, with the reason, while a step model cannot serve.

    ``state`` and ``reason`` are what every reader (request routing, readiness, the index) consults,
    so deriving them here keeps those readers unaware of ensembles.  The stored values still rule
    once the version itself is stopped or unloaded.
    """

    __slots__ = ("_checked", "_config", "_decoupled", "_models", "_problem", "_steps")

    def __init__(
        self,
        config: mc.ModelConfig,
        steps: tuple[Step, ...],
        decoupled: frozenset[int],
        models: Mapping[str, Model],
        **fields: Any,
    ) -> None:
        """``decoupled``: the indices of the steps whose model was decoupled when it was built."""
        self._config = config
        self._steps = steps
        self._decoupled = decoupled
        self._models = models
        self._checked = self._step_models()
        self._problem = ""
        super().__init__(**fields)

    def _step_models(self) -> tuple[Model | None, ...]:
        return tuple(self._models.get(step.model_name) for step in self._steps)

    def _current_problem(self) -> str:
        """ "" while every step model serves a configuration this graph was checked against.

        Read on every request (routing consults ``state``), so the common case is a plain loop."""
        models = self._models
        reloaded = False
        for step, checked in zip(self._steps, self._checked, strict=True):
            model = models.get(step.model_name)
            if model is not checked:
                reloaded = True
            if model is None or not _serving(model, step.model_version):
                return _unavailable(self._config.name, step, models)
        if reloaded:  # a step model was reloaded: check the graph against its configuration again
            self._checked = self._step_models()
            try:
                now = _check_steps(self._config, self._steps, models)
                self._problem = _policy_change(self._config.name, self._steps, self._decoupled, now)
            except InvalidArgumentError as exc:
                self._problem = exc.message
        return self._problem

    @property
    def state(self) -> ModelState:
        stored: ModelState = _STATE.__get__(self)
        if stored is _READY and self._current_problem():
            return ModelState.UNAVAILABLE
        return stored

    @state.setter
    def state(self, value: ModelState) -> None:
        _STATE.__set__(self, value)

    @property
    def reason(self) -> str:
        if _STATE.__get__(self) is _READY:
            return self._current_problem()
        stored: str = _REASON.__get__(self)
        return stored

    @reason.setter
    def reason(self, value: str) -> None:
        _REASON.__set__(self, value)


def _policy_change(
    ensemble: str, steps: tuple[Step, ...], loaded: frozenset[int], now: frozenset[int]
) -> str:
    """Why a version cannot serve since a step model's transaction policy changed ("" if none did):
    its stages, and whether the ensemble is decoupled, were fixed when it was built."""
    for step in steps:
        if (step.index in loaded) != (step.index in now):
            change = "now" if step.index in now else "no longer"
            return (
                f"in ensemble {ensemble}, step {step.index} model {step.model_name} is {change} "
                "decoupled: load the ensemble again"
            )
    return ""


#: The slots of :class:`ModelVersion` that :class:`EnsembleVersion` derives its views from.
_STATE = ModelVersion.__dict__["state"]
_REASON = ModelVersion.__dict__["reason"]


def _fits(
    config: mc.ModelConfig, steps: tuple[Step, ...], models: Mapping[str, Model]
) -> dict[tuple[int, str], Fit]:
    """Where a tensor made by a batching end (the ensemble's request, or a step's model) is taken by a
    non-batching one, or the other way round: each step input (step index, input name) and ensemble
    output (-1, output name) there, with the consumer's dims (see :class:`Fit`)."""
    ensemble_batches = config.max_batch_size > 0
    made_batched = {tensor.name: ensemble_batches for tensor in config.input}
    step_configs = {}
    for step in steps:
        step_config = models[step.model_name].config
        assert step_config is not None  # checked: every step model serves
        step_configs[step.index] = step_config
        for _, tensor in step.outputs:
            made_batched[tensor] = step_config.max_batch_size > 0
    fits: dict[tuple[int, str], Fit] = {}
    for step in steps:
        step_config = step_configs[step.index]
        batches = step_config.max_batch_size > 0
        dims = {spec.name: tuple(spec.dims) for spec in step_config.input}
        for model_input, tensor in step.inputs:
            if made_batched.get(tensor, batches) != batches:
                fits[(step.index, model_input)] = Fit(dims[model_input], batches)
    for output in config.output:
        if made_batched.get(output.name, ensemble_batches) != ensemble_batches:
            fits[(-1, output.name)] = Fit(tuple(output.dims), ensemble_batches)
    return fits


def build_version(
    plan: LoadPlan,
    number: int,
    models: Mapping[str, Model],
    resolve: Resolver,
    cache: ResponseCache | None = None,
) -> EnsembleVersion:
    """A READY ensemble version of the polled ``plan``; INVALID_ARG with the reason if it cannot serve.
    ``cache`` is the server's response cache, which step models with ``response_cache`` use."""
    config = plan.config
    steps, stages = check_ensemble(config, models)
    refuse_uncacheable(config)  # (decoupled once a step is: ``complete_config``)
    scheduler = EnsembleScheduler(
        config.name,
        stages,
        # (its answers carry them in the order Triton's scheduler keeps them: a std::unordered_map)
        tuple(unordered_map_order([tensor.name for tensor in config.output])),
        step_runner(resolve, cache),
        config.ensemble_scheduling.max_inflight_requests,
        batching=config.max_batch_size > 0,
        fits=_fits(config, steps, models),
        optional_inputs=tuple(tensor.name for tensor in config.input if tensor.optional),
        input_reshapes=_reshapes(config.input),
        output_reshapes=_reshapes(config.output),
    )
    if SchedulerStats.first_responses:  # (its config says whether it streams: ``complete_config``)
        decoupled = config.model_transaction_policy.decoupled
        scheduler.stats.count_first_responses(first_response_bounds(config), decoupled)
    version = EnsembleVersion(
        config,
        steps,
        frozenset(stage.producer.index for stage in stages if stage.producer is not None),
        models,
        version=number,
        state=ModelState.READY,
        scheduler=scheduler,
        fingerprint=plan.fingerprints[number],
        model_name=plan.name,
        model_dir=plan.path,
        scratch=plan.scratch,
    )
    version.labels = _borrowed_labels(config, steps, models)
    return version


def _borrowed_labels(
    config: mc.ModelConfig, steps: Sequence[Step], models: Mapping[str, Model]
) -> dict[str, Path]:
    """The label files of the ensemble's outputs that name none: each that of the step model's output
    that makes it (its own file, or one it borrowed in turn: an ensemble step), as Triton's core
    completes an ensemble's labels when it loads it (a classification of such an output then reads
    ``value:index:label``, not ``value:index``)."""
    unlabelled = {output.name for output in config.output if not output.label_filename}
    borrowed: dict[str, Path] = {}
    for step in steps:
        model = models.get(step.model_name)
        if model is None:
            continue
        chosen = step.model_version
        version = model.versions.get(int(chosen)) if chosen else model.latest_ready()
        if version is None:
            continue
        for model_output, tensor in step.outputs:
            if tensor in unlabelled and (path := label_file(model, version, model_output)) is not None:
                borrowed[tensor] = path
    return borrowed
