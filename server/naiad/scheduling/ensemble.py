"""The ensemble scheduler: a request flows through a DAG of other models' steps.

An ensemble (``platform: "ensemble"``) names its steps in ``ensemble_scheduling``; each step maps
ensemble tensors to its model's inputs (``input_map``) and its model's outputs to new ensemble tensors
(``output_map``).  A request starts with the ensemble's inputs as tensors; every step whose inputs all
exist runs at once (independent branches in parallel), and the ensemble's outputs are collected when
every step has run.  Steps go through their model's own scheduler, by a callback the repository
installs (this layer knows nothing of models), so a step's request is queued and batched with that
model's other traffic exactly as a client's request would be.

The graph was checked when the ensemble loaded (:mod:`naiad.repository.ensemble`), so here every step
is known to run once its inputs exist.  A failed step fails the request with an error naming the step;
steps still running are cancelled (queued ones leave their queue).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from naiad.core.errors import InferenceServerError, UnavailableError
from naiad.core.request import InferRequest, InferResponse, RequestedOutput, Tensor
from naiad.scheduling.stats import FailureReason, SchedulerStats

#: Runs one step's request on its model (resolve, validate, schedule); installed by the repository.
StepRunner = Callable[[InferRequest], Awaitable[InferResponse]]

_MONOTONIC_NS = time.monotonic_ns


@dataclass(frozen=True, slots=True)
class Step:
    """One step: ``inputs`` maps the model's input names to ensemble tensors, ``outputs`` the model's
    output names to ensemble tensors; ``model_version`` is ``""`` for the model's default version."""

    index: int
    model_name: str
    model_version: str
    inputs: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]

    def label(self, ensemble: str) -> str:
        return f"in ensemble '{ensemble}', step {self.index} (model '{self.model_name}')"


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


def steps_of(config: Any) -> tuple[Step, ...]:
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
        self, name: str, steps: tuple[Step, ...], outputs: tuple[str, ...], run_step: StepRunner
    ) -> None:
        """``outputs`` are the ensemble's output tensors (the intermediate ones stay inside)."""
        self.name = name
        self.steps = steps
        self.outputs = outputs
        self._run_step = run_step
        self._chain = _chain_of(steps)
        self.stats = SchedulerStats(lambda: 0)

    async def submit(self, request: InferRequest) -> InferResponse:
        """Run every step as soon as its inputs exist; the ensemble's tensors, or the first error."""
        start = _MONOTONIC_NS()
        try:
            tensors = await self._flow(request)
        except InferenceServerError:
            self.stats.fail(FailureReason.BACKEND, _MONOTONIC_NS() - start)
            raise
        except asyncio.CancelledError:
            self.stats.fail(FailureReason.CANCELED, _MONOTONIC_NS() - start)
            raise
        elapsed = _MONOTONIC_NS() - start
        self.stats.success_count += 1
        self.stats.success_ns += elapsed
        self.stats.compute_infer_ns += elapsed
        self.stats.observe(elapsed, 0, 0, elapsed, 0)
        outputs = [tensors[name] for name in self.outputs if name in tensors]
        return InferResponse(self.name, "", request.id, outputs)

    async def _flow(self, request: InferRequest) -> dict[str, Tensor]:
        tensors = {tensor.name: tensor for tensor in request.inputs}
        if self._chain is not None:  # one step after the other: no bookkeeping, no tasks
            for step in self._chain:
                if any(name not in tensors for _, name in step.inputs):
                    break  # an optional input is missing: say which steps cannot run, below
                self._collect(step, await self._step(step, request, tensors), tensors)
            else:
                return tensors
        waiting = [step for step in self.steps if not all(name in tensors for _, name in step.outputs)]
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
                    names = ", ".join(f"'{step.model_name}'" for step in waiting)
                    raise UnavailableError(f"ensemble '{self.name}' cannot run steps {names}")
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    self._collect(running.pop(task), task.result(), tensors)
        finally:
            for task in running:
                task.cancel()
        return tensors

    async def _step(self, step: Step, request: InferRequest, tensors: dict[str, Tensor]) -> InferResponse:
        step_request = InferRequest(
            model_name=step.model_name,
            model_version=step.model_version,
            id=request.id,
            inputs=[
                Tensor(model_input, tensors[name].datatype, tensors[name].data)
                for model_input, name in step.inputs
            ],
            outputs=[RequestedOutput(model_output) for model_output, _ in step.outputs],
            parameters=request.parameters,
            priority=request.priority,
            timeout_us=request.timeout_us,
            sequence_id=request.sequence_id,
            sequence_start=request.sequence_start,
            sequence_end=request.sequence_end,
            headers=request.headers,
        )
        try:
            return await self._run_step(step_request)
        except InferenceServerError as exc:
            raise InferenceServerError(f"{step.label(self.name)}: {exc.message}", exc.code) from None

    def _collect(self, step: Step, response: InferResponse, tensors: dict[str, Tensor]) -> None:
        by_name = {tensor.name: tensor for tensor in response.outputs}
        for model_output, name in step.outputs:
            tensor = by_name.get(model_output)
            if tensor is None:
                raise UnavailableError(
                    f"{step.label(self.name)}: the model did not produce output '{model_output}'"
                )
            tensors[name] = Tensor(name, tensor.datatype, tensor.data)

    def close(self) -> None:
        """Nothing to release: the steps' models own their instances (the repository has already
        waited for this version's requests to finish)."""
