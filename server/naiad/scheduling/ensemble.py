"""The ensemble scheduler: a request flows through a DAG of other models' steps.

An ensemble (``platform: "ensemble"``) names its steps in ``ensemble_scheduling``; each step maps
ensemble tensors to its model's inputs (``input_map``) and its model's outputs to new ensemble tensors
(``output_map``).  A request starts with the ensemble's inputs as tensors; every step whose inputs all
exist runs at once (independent branches in parallel), and the ensemble's outputs are collected when
every step has run.  Steps go through their model's own scheduler, by a callback the repository
installs (this layer knows nothing of models), so a step's request is queued and batched with that
model's other traffic exactly as a client's request would be.

A step whose model is decoupled (a *producer*) answers 0..N times, and, as in Triton, each of its
responses flows on through the steps after it as a set of tensors of its own; the ensemble is then
decoupled too and answers once per set that reaches its outputs, as each does, then sends the final
flag (with the last answer when nothing else is still flowing, alone otherwise).  The load checks
(:mod:`naiad.repository.ensemble`) guarantee that no step mixes tensors of different producers'
responses, so the steps fall into stages (:class:`Stage`): the steps that run once per set of tensors,
then the producer whose every response starts the next stage on a copy of them.  An ensemble without
producers is one stage and runs as it always did, without any of this bookkeeping.

``max_inflight_requests`` (``ensemble_scheduling``, 0: no cap) caps how many requests each step has in
flight, counted over all the ensemble version's requests as current Triton counts them
(:mod:`naiad.scheduling.step_limit`): a producer faster than the steps after it, or many clients at
once, do not flood the composing models' queues; the sets of tensors wait in the ensemble, in order,
and none is dropped.  The producer itself is not paused: its responses come from the model's own
threads, and blocking one of those on steps that may need the same model instance could deadlock.

As in Triton, a request runs only the steps its requested outputs need (the others' models never see
it, nor count it); an optional ensemble input the request leaves out, or an output a composing model
leaves out, is a tensor known to be absent: the steps that read it run without it (their model
refuses the request unless that input is optional for it) and the answer leaves it out (Triton's
verbose line says so); and every answer with outputs (each of a decoupled
ensemble's too) carries the request's sequence ID and flags as parameters (``sequence_id``,
``sequence_start``, ``sequence_end``; checked side by side with Triton 2.51).

The graph was checked when the ensemble loaded, so here every step is known to run once its inputs
exist.  A failed step fails the request with an error naming the step (after the responses already
sent, for a decoupled ensemble); steps still running are cancelled (queued ones leave their queue).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from naiad.backends.batching import reshape_batch
from naiad.core.errors import InferenceServerError, UnavailableError
from naiad.core.request import (
    InferRequest,
    InferResponse,
    Parameters,
    RequestedOutput,
    ResponseSink,
    Tensor,
)
from naiad.scheduling.answers import answers
from naiad.scheduling.scheduler import Waiter
from naiad.scheduling.stats import FailureReason, SchedulerStats
from naiad.scheduling.step_limit import StepLimit

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

#: Runs one step's request on its model (resolve, validate, schedule); installed by the repository.
#: A producer's request carries a ``responses`` sink, which gets its answers, as the data plane's does.
StepRunner = Callable[[InferRequest], Awaitable[InferResponse]]

_MONOTONIC_NS = time.monotonic_ns

log = logging.getLogger("naiad.scheduling")

#: An ensemble request's tensors by name; ``None`` for one known to be absent: an optional input of
#: the ensemble the request left out, or an output a composing model left out of its answer.
Tensors = dict[str, Tensor | None]
#: A tensor's config ``dims`` and ``reshape``.
Reshape = tuple[tuple[int, ...], tuple[int, ...]]

#: How many sets of requested outputs an ensemble keeps its steps for (``_stage_for``).
_PRUNED_KEPT = 64


@dataclass(frozen=True, slots=True)
class Step:
    """One step: ``inputs`` maps the model's input names to ensemble tensors, ``outputs`` the model's
    output names to ensemble tensors; ``model_version`` is ``""`` for the model's default version."""

    index: int
    model_name: str
    model_version: str
    inputs: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]


def _chain_of(steps: tuple[Step, ...]) -> tuple[Step, ...] | None:
    """The steps in the only order they can run, when each needs the one before (a pipeline, the
    common case); ``None`` when some could run side by side."""
    produced = {name for step in steps for _, name in step.outputs}
    available = {name for step in steps for _, name in step.inputs if name not in produced}
    waiting = list(steps)
    chain: list[Step] = []
    while waiting:
        ready = [step for step in waiting if all(name in available for _, name in step.inputs)]
        if len(ready) != 1:
            return None
        chain.append(ready[0])
        waiting.remove(ready[0])
        available.update(name for _, name in ready[0].outputs)
    return tuple(chain)


@dataclass(frozen=True, slots=True)
class Stage:
    """The steps that run once per set of tensors (``steps``, in a ``chain`` when they form one),
    then the decoupled step (``producer``) each of whose responses starts the next stage; the last
    stage has no producer, and its tensors are the ensemble's answer."""

    steps: tuple[Step, ...]
    producer: Step | None = None
    chain: tuple[Step, ...] | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "chain", _chain_of(self.steps))


@dataclass(frozen=True, slots=True)
class Fit:
    """Where a tensor made by a batching end meets a non-batching one, or the other way round: the
    consumer's configured ``dims`` and whether it batches.  As Triton's ensembles do, a tensor without
    a batch dimension going to a batching consumer gets one of 1 when its shape is the consumer's
    ``dims``; a batched one going to a non-batching consumer loses a batch dimension of 1 when its
    shape is not the consumer's ``dims`` (a non-batching ensemble over batching models works so)."""

    dims: tuple[int, ...]
    batches: bool

    def apply(self, data: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        fits = len(self.dims) == data.ndim and all(
            d in (-1, n) for d, n in zip(self.dims, data.shape, strict=True)
        )
        if self.batches:
            return data.reshape((1, *data.shape)) if fits else data
        if not fits and data.ndim and data.shape[0] == 1:
            return data.reshape(data.shape[1:])
        return data


def needed_for(steps: tuple[Step, ...], wanted: frozenset[str]) -> tuple[Step, ...]:
    """Of ``steps``, in their order, those that make the tensors ``wanted``, directly or through the
    steps after them: the only ones a request asking for those outputs runs."""
    needed = set(wanted)
    chosen: set[int] = set()
    changed = True
    while changed:  # (steps may be listed in any order: until no step is added)
        changed = False
        for step in steps:
            if step.index not in chosen and any(name in needed for _, name in step.outputs):
                chosen.add(step.index)
                needed.update(name for _, name in step.inputs)
                changed = True
    return tuple(step for step in steps if step.index in chosen)


def steps_of(config: mc.ModelConfig) -> tuple[Step, ...]:
    """The steps of an ensemble's ``ModelConfig``, in configuration order."""
    return tuple(
        Step(
            index=index,
            model_name=step.model_name,
            model_version="" if step.model_version < 0 else str(step.model_version),
            inputs=tuple(sorted(step.input_map.items())),
            outputs=tuple(sorted(step.output_map.items())),
        )
        for index, step in enumerate(config.ensemble_scheduling.step)
    )


class EnsembleScheduler:
    """Runs requests for an ensemble version through its steps' models."""

    def __init__(
        self,
        name: str,
        stages: tuple[Stage, ...],
        outputs: tuple[str, ...],
        run_step: StepRunner,
        max_inflight_requests: int = 0,
        *,
        batching: bool = False,
        fits: dict[tuple[int, str], Fit] | None = None,
        optional_inputs: tuple[str, ...] = (),
        input_reshapes: Mapping[str, Reshape] | None = None,
        output_reshapes: Mapping[str, Reshape] | None = None,
    ) -> None:
        """``outputs`` are the ensemble's output tensors (the intermediate ones stay inside);
        ``max_inflight_requests`` (0: no cap) caps each step's requests in flight; ``batching``: the
        ensemble has a ``max_batch_size``, so each request counts its batch size of inferences (as
        Triton counts an ensemble's).  ``fits``: the step inputs (by step index and input name) and the
        ensemble's outputs (by index -1 and output name) where a batching end meets a non-batching one
        (see :class:`Fit`); ``optional_inputs``: the ensemble's inputs a request may leave out;
        ``input_reshapes`` / ``output_reshapes``: the ``dims`` and ``reshape`` of the inputs and outputs
        whose config reshapes them: as in Triton, the steps see the reshaped inputs, and the outputs
        the steps made in the ``reshape`` shape go to the client in the ``dims`` one."""
        self.batching = batching
        self._optional_inputs = optional_inputs
        self._input_reshapes = dict(input_reshapes or {})
        self._output_reshapes = dict(output_reshapes or {})
        self.name = name
        self.stages = stages
        self.outputs = outputs
        self.max_inflight_requests = max_inflight_requests
        self._run_step = run_step
        #: Each step's slots, shared by all requests, when ``max_inflight_requests`` caps them.
        self._limits: dict[int, StepLimit] | None = None
        if max_inflight_requests:
            cap = max_inflight_requests
            log.info("Ensemble model '%s' configured with max_inflight_requests: %d", name, cap)
            steps_of = [step for stage in stages for step in _all(stage)]
            self._limits = {step.index: StepLimit(cap, name, step.index) for step in steps_of}
        self._fits = fits or {}
        self._decoupled = len(stages) > 1
        self.stats = SchedulerStats(lambda: 0)
        #: The tensors more than one reader takes (steps, or a step and the ensemble's answer): a
        #: step gets those read-only (see ``_step_request``); one it alone reads, as they are.
        steps = [step for stage in stages for step in (*stage.steps, stage.producer) if step is not None]
        readers = collections.Counter(name for step in steps for _, name in step.inputs)
        readers.update(outputs)
        self._shared = frozenset(name for name, count in readers.items() if count > 1)
        #: The steps a request asking for some outputs only runs, by those outputs (see ``_stage_for``).
        self._pruned: dict[frozenset[str], Stage] = {}

    starts_at_once = False

    def start_at_once(self, request: InferRequest, waiter: Waiter) -> bool:
        """Never: an ensemble's request runs its steps (``submit``)."""
        return False

    async def submit(self, request: InferRequest) -> InferResponse:
        """Run every step as soon as its inputs exist; the ensemble's tensors, or the first error.

        A decoupled ensemble answers through ``request.responses`` and returns an empty response."""
        start = _MONOTONIC_NS()
        try:
            if self._decoupled:
                await self._stream(request)
                tensors: Tensors = {}
            else:
                tensors = await self._flow(self._stage_for(request), request, self._given(request))
        except InferenceServerError:
            # Triton counts a failed ensemble request twice, both times OTHER whatever failed: for
            # the error answer it sends, then when the request ends (checked with Triton 2.51; qa's
            # L0_model_queue expects it); the step's own model counts the step's reason once
            elapsed = _MONOTONIC_NS() - start
            self.stats.fail(FailureReason.OTHER, elapsed)
            self.stats.fail(FailureReason.OTHER, elapsed)
            raise
        except asyncio.CancelledError:
            self.stats.fail(FailureReason.CANCELED, _MONOTONIC_NS() - start)
            raise
        elapsed = _MONOTONIC_NS() - start
        self.stats.success_count += 1
        self.stats.inference_count += request.batch_size if self.batching else 1
        self.stats.success_ns += elapsed
        self.stats.compute_infer_ns += elapsed
        self.stats.observe(elapsed, 0, 0, elapsed, 0)
        # Triton counts each ensemble request as one execution of its batch size
        self.stats.execution(request.batch_size if self.batching else 1, 0, elapsed, 0)
        return self._response(request, tensors)

    def _response(self, request: InferRequest, tensors: Tensors) -> InferResponse:
        """An answer of the ensemble from its ``tensors``: the outputs ``request`` asks for, and, when
        there are any, its sequence ID and flags as parameters (Triton 2.51 adds them to every
        ensemble answer with outputs, each of a decoupled one's too; not to an answer without)."""
        outputs = self._answer(tensors)
        if request.outputs is not None:
            wanted = {output.name for output in request.outputs}
            outputs = [tensor for tensor in outputs if tensor.name in wanted]
        if not outputs:
            return InferResponse(self.name, "", request.id, outputs)
        sequence: Parameters = {
            "sequence_id": request.sequence_id or 0,
            "sequence_start": request.sequence_start,
            "sequence_end": request.sequence_end,
        }
        return InferResponse(self.name, "", request.id, outputs, sequence)

    def _answer(self, tensors: Tensors) -> list[Tensor]:
        answer = []
        for name in self.outputs:
            tensor = tensors.get(name)
            if tensor is not None:
                answer.append(tensor)
            elif name in tensors:  # (Triton's verbose line)
                log.debug("Composing models did not output tensor %s", name)
        if self._fits:
            for index, tensor in enumerate(answer):
                fit = self._fits.get((-1, tensor.name))
                if fit is not None:
                    answer[index] = Tensor(tensor.name, tensor.datatype, fit.apply(tensor.data))
        if self._output_reshapes:
            for index, tensor in enumerate(answer):
                shapes = self._output_reshapes.get(tensor.name)
                if shapes is not None:
                    dims, reshape = shapes
                    data = reshape_batch(tensor.data, reshape, dims, self.batching)
                    answer[index] = Tensor(tensor.name, tensor.datatype, data, tensor.parameters)
        return answer

    def _stage_for(self, request: InferRequest) -> Stage:
        """The steps of a non-decoupled ensemble that ``request`` runs: those its requested outputs need."""
        stage = self.stages[0]
        if request.outputs is None:
            return stage
        wanted = frozenset(output.name for output in request.outputs)
        pruned = self._pruned.get(wanted)
        if pruned is None:
            if len(self._pruned) >= _PRUNED_KEPT:  # (subsets of many outputs: keep the memory bounded)
                self._pruned.clear()
            pruned = self._pruned[wanted] = Stage(needed_for(stage.steps, wanted))
        return pruned

    def _given(self, request: InferRequest) -> Tensors:
        """The request's inputs, and the optional inputs of the ensemble it left out, as absent."""
        tensors: Tensors = {tensor.name: tensor for tensor in request.inputs}
        for name, (dims, reshape) in self._input_reshapes.items():
            given = tensors.get(name)
            if given is not None:
                data = reshape_batch(given.data, dims, reshape, self.batching)
                tensors[name] = Tensor(name, given.datatype, data, given.parameters)
        for name in self._optional_inputs:
            tensors.setdefault(name, None)
        return tensors

    async def _flow(
        self,
        stage: Stage,
        request: InferRequest,
        tensors: Tensors,
    ) -> Tensors:
        """Run ``stage``'s steps on ``tensors``, adding their outputs to it."""
        waiting = list(stage.steps)
        if stage.chain is not None:  # one step after the other: no bookkeeping, no tasks
            for step in stage.chain:
                if any(name not in tensors for _, name in step.inputs):
                    break  # an optional input is missing: say which steps cannot run, below
                self._collect(step, await self._step(step, request, tensors), tensors)
                waiting.remove(step)
            else:
                return tensors
        running: dict[asyncio.Task[InferResponse], Step] = {}
        try:
            while waiting or running:
                ready = [step for step in waiting if all(name in tensors for _, name in step.inputs)]
                for step in ready:
                    waiting.remove(step)
                if len(ready) == 1 and not running:  # a chain: no task needed
                    step = ready[0]
                    self._collect(step, await self._step(step, request, tensors), tensors)
                    continue
                for step in ready:
                    running[asyncio.ensure_future(self._step(step, request, tensors))] = step
                if not running:  # an optional ensemble input was not given, and these steps need it
                    self._cannot_run(waiting)
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    self._collect(running.pop(task), task.result(), tensors)
        finally:
            for task in running:
                task.cancel()
        return tensors

    def _cannot_run(self, steps: list[Step]) -> NoReturn:
        names = ", ".join(f"'{step.model_name}'" for step in steps)
        raise UnavailableError(f"ensemble '{self.name}' cannot run steps {names}")

    def _step_request(self, step: Step, request: InferRequest, tensors: Tensors) -> InferRequest:
        """A step's request.  An input that other steps (or the ensemble's answer) read too is a
        read-only view: a model that changes an input in place, as Triton's Python models may, then
        works on a copy of its own (``pb_utils`` makes it), and the others never see its change.
        A tensor known to be absent is left out, as Triton leaves it out: the step's model then
        refuses the request unless that input is optional for it."""
        shared, fits = self._shared, self._fits
        inputs = []
        for model_input, name in step.inputs:
            tensor = tensors[name]
            if tensor is None:
                continue
            data = _read_only(tensor.data) if name in shared else tensor.data
            fit = fits.get((step.index, model_input)) if fits else None
            inputs.append(Tensor(model_input, tensor.datatype, data if fit is None else fit.apply(data)))
        return InferRequest(
            model_name=step.model_name,
            model_version=step.model_version,
            id=request.id,
            inputs=inputs,
            outputs=[RequestedOutput(model_output) for model_output, _ in step.outputs],
            parameters=request.parameters,
            priority=request.priority,
            timeout_us=request.timeout_us,
            sequence_id=request.sequence_id,
            sequence_start=request.sequence_start,
            sequence_end=request.sequence_end,
            headers=request.headers,
        )

    async def _step(
        self,
        step: Step,
        request: InferRequest,
        tensors: Tensors,
    ) -> InferResponse:
        step_request = self._step_request(step, request, tensors)
        try:
            if self._limits is None:
                return await self._run_step(step_request)
            async with self._limits[step.index]:
                return await self._run_step(step_request)
        except InferenceServerError as exc:
            raise self._failed(step, exc) from None

    def _failed(self, step: Step, error: InferenceServerError) -> InferenceServerError:
        """A step's error in Triton's words (clients match them): the ensemble named before the
        step's own message, which names its model where the model's error does; the step is logged."""
        log.debug(
            "ensemble '%s' step %d (model '%s') failed: %s", self.name, step.index, step.model_name, error
        )
        return InferenceServerError(f"in ensemble '{self.name}', {error.message}", error.code)

    def _collect(self, step: Step, response: InferResponse, tensors: Tensors) -> None:
        """Add ``step``'s outputs to ``tensors``; one its model left out is known to be absent (as in
        Triton: the steps that read it run without it, and the answer leaves it out)."""
        by_name = {tensor.name: tensor for tensor in response.outputs}
        for model_output, name in step.outputs:
            tensor = by_name.get(model_output)
            tensors[name] = None if tensor is None else Tensor(name, tensor.datatype, tensor.data)

    # ---- decoupled ensembles -------------------------------------------------------------------

    async def _stream(self, request: InferRequest) -> None:
        """Send every answer of a decoupled ensemble through the request's sink, then its final flag."""
        sink = request.responses
        assert sink is not None, "a decoupled ensemble is only ever streamed"
        run = _Run(request, sink)
        run.spawn(self._path(run, 0, self._given(request)))
        try:
            await run.done
        finally:
            for path in run.paths:
                path.cancel()
        sink(run.last, True)  # sent once the request is over, as its scheduler counts it

    async def _path(self, run: _Run, index: int, tensors: Tensors) -> None:
        """One set of tensors through stage ``index``: the ensemble's answer at the last stage, else
        the producer's request, each of whose responses starts the next stage on a copy of them."""
        stage = self.stages[index]
        await self._flow(stage, run.request, tensors)
        producer = stage.producer
        if producer is None:
            run.answer(self._response(run.request, tensors))
            return
        if any(name not in tensors for _, name in producer.inputs):
            self._cannot_run([producer])

        def each(response: InferResponse) -> None:
            following = dict(tensors)
            self._collect(producer, response, following)
            run.spawn(self._path(run, index + 1, following))

        if self._limits is None:
            await self._produce(producer, run.request, tensors, each)
        else:
            async with self._limits[producer.index]:
                await self._produce(producer, run.request, tensors, each)

    async def _produce(
        self,
        step: Step,
        request: InferRequest,
        tensors: Tensors,
        each: Callable[[InferResponse], None],
    ) -> None:
        """Run a producer step, handing each of its responses to ``each`` in order, until its final flag."""
        step_request = self._step_request(step, request, tensors)
        async with aclosing(answers(step_request, self._run_step)) as items:
            async for answer, _ in items:
                if isinstance(answer, InferenceServerError):
                    raise self._failed(step, answer)
                if answer is not None:
                    each(answer)

    def close(self) -> None:
        """Nothing to release: the steps' models own their instances (the repository has already
        waited for this version's requests to finish)."""


def _all(stage: Stage) -> tuple[Step, ...]:
    return stage.steps if stage.producer is None else (*stage.steps, stage.producer)


class _Run:
    """One request to a decoupled ensemble: the paths (sets of tensors) still flowing through it, and
    the sink its answers go to.

    ``done`` resolves when the last path ends, or fails with the first path's error, recorded as the
    path raises it so that no other path's answer follows it.  ``last`` is the answer of the path
    that ended last, when no other was left to answer after it: it goes with the final flag."""

    __slots__ = ("done", "last", "paths", "request", "sink")

    def __init__(self, request: InferRequest, sink: ResponseSink) -> None:
        self.request = request
        self.sink = sink
        self.paths: set[asyncio.Future[None]] = set()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.last: InferResponse | None = None

    def spawn(self, path: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(self._follow(path))
        self.paths.add(task)
        task.add_done_callback(self._ended)

    async def _follow(self, path: Coroutine[Any, Any, None]) -> None:
        try:
            await path
        except Exception as error:  # the first one fails the request at once; later ones add nothing
            if not self.done.done():
                self.done.set_exception(error)

    def _ended(self, task: asyncio.Future[None]) -> None:
        self.paths.discard(task)
        if not self.paths and not self.done.done():
            self.done.set_result(None)

    def answer(self, response: InferResponse) -> None:
        """Send one answer, unless the request already failed; keep it for the final flag when no
        other path is left (as Triton flags the last answer final when it knows it is)."""
        if self.done.done():
            return
        if len(self.paths) == 1:  # only the path answering
            self.last = response
        else:
            self.sink(response, False)


def _read_only(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if not array.flags.writeable:
        return array
    view = array.view()
    view.flags.writeable = False
    return view
