"""What the dynamic and the sequence batcher share: a scheduler whose state lives on the event loop.

Both keep their queues on the loop thread and take no locks: instance threads hand finished executions
back with ``call_soon_threadsafe``, an instance the loop drives (a model process's) calls back on the
loop itself, one timer wakes the scheduler for a batch delay, a queue timeout or an idle sequence, and
closing (from the repository's pool, off the loop) asks the loop to run what is queued before the
instances are released, or answers it with UNAVAILABLE when that takes too long.  Those mechanics are
written once here; each scheduler says what its queue is (the hooks below).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, cast

from naiad.backends.base import ExecuteResult
from naiad.core.errors import InternalError, UnavailableError
from naiad.core.request import InferRequest
from naiad.scheduling.queue import QueuedRequest
from naiad.scheduling.stats import FailureReason, SchedulerStats
from naiad.scheduling.worker import Execution, InstanceWorker, log_executing, log_released

_MONOTONIC_NS = time.monotonic_ns
#: Event-loop timers have millisecond granularity; shorter waits poll on each loop iteration.
_TIMER_RESOLUTION_NS = 1_000_000


log = logging.getLogger("naiad.scheduling")


class LoopDriven(Protocol):
    """An instance the loop drives (``loop_driven``: a model process's, ``ProcessModelInstance``)."""

    @property
    def load(self) -> int: ...

    @property
    def waiting(self) -> int: ...

    def start_on_loop(
        self, requests: Sequence[InferRequest], done: Callable[[list[ExecuteResult]], None]
    ) -> None: ...


def loop_driven(worker: InstanceWorker) -> bool:
    """Whether ``worker``'s instance runs its executions from the loop (see ``_start_on``): a model
    process's that makes no BLS calls, not under the rate limiter, whose gate its thread waits for."""
    return worker.gate is None and bool(getattr(worker.instance, "loop_driven", False))


class LoopScheduler(ABC):
    """The event-loop half of a scheduler: its timer, the instances' way back, and closing."""

    stats: SchedulerStats

    def __init__(self, model_name: str) -> None:
        self._model_name = model_name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.Handle | None = None
        self._timer_ns = 0
        self._closing = False
        #: Set by ``close`` while it waits for the queue to drain; ``_check_drained`` signals it.
        self._drained: threading.Event | None = None

    # ---- what each scheduler defines --------------------------------------------------------------

    @abstractmethod
    def _finished(self, execution: Execution) -> None:
        """An instance finished ``execution``: answer its requests and dispatch more (on the loop)."""

    @abstractmethod
    def _dispatch_due(self, now: int) -> None:
        """Hand every instance that is free what it may run at ``now``."""

    @abstractmethod
    def _empty(self) -> bool:
        """Nothing queued and nothing running: a closing scheduler has drained."""

    @abstractmethod
    def _take_queued(self) -> Iterable[QueuedRequest]:
        """Remove and yield every request still waiting to run."""

    @abstractmethod
    def _stop_instances(self, timeout: float) -> None:
        """Tell every instance's thread to finish and wait for it (up to ``timeout`` each)."""

    # ---- the timer ------------------------------------------------------------------------------

    def _arm(self, when_ns: int) -> None:
        """Make sure the scheduler wakes by ``when_ns`` (an earlier wake-up already does)."""
        if self._timer is not None and self._timer_ns <= when_ns:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = self._loop
        assert loop is not None
        remaining = when_ns - _MONOTONIC_NS()
        self._timer_ns = when_ns
        if remaining < _TIMER_RESOLUTION_NS:
            self._timer = loop.call_soon(self._wake)
        else:
            self._timer = loop.call_later(remaining / 1e9, self._wake)

    def _wake(self) -> None:
        self._timer = None
        self._dispatch_due(_MONOTONIC_NS())
        if self._drained is not None:
            self._check_drained()

    # ---- instances the loop drives ----------------------------------------------------------------

    def _start_on(self, worker: InstanceWorker, execution: Execution) -> None:
        """Run ``execution`` on ``worker``'s loop-driven instance and call ``_finished`` on the loop:
        the instance sends it to its model process at once, or after those sent before it, and
        calls back when the results come, with no thread hand-off on either side (an instance's
        thread would cost two per execution).  As an instance's thread does, it counts the requests
        taken and skips those flagged cancelled (unless the batch keeps them in place)."""
        loop = self._loop
        assert loop is not None
        worker.started += len(execution.entries)
        entries = execution.skip_cancelled()
        if not entries:
            loop.call_soon(self._finished, execution)
            return
        execution.start_ns = _MONOTONIC_NS()
        if log.isEnabledFor(logging.DEBUG):
            log_executing(entries, worker.name)
        started = False

        def done(results: list[ExecuteResult]) -> None:
            if log.isEnabledFor(logging.DEBUG):
                log_released(entries, worker.name)
            if len(results) != len(entries):
                message = f"backend returned {len(results)} responses for {len(entries)} requests"
                results = [InternalError(message) for _ in entries]
            execution.results = results
            execution.end_ns = end_ns = _MONOTONIC_NS()
            execution.dispatch_ns, execution.start_ns = worker.ended(
                execution.dispatch_ns, execution.start_ns, end_ns
            )
            if started:
                self._finished(execution)
            else:  # failed at once (its process is restarting): not from within this call, where the
                # next batch of a long queue would fail at once too, and so on down the stack
                loop.call_soon(self._finished, execution)

        cast(LoopDriven, worker.instance).start_on_loop([entry.request for entry in entries], done)
        started = True

    # ---- results --------------------------------------------------------------------------------

    def _finished_threadsafe(self, execution: Execution) -> None:
        """Called on an instance's thread: continue on the event loop."""
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._finished, execution)
        except RuntimeError:  # the loop closed while the instance ran: nobody is waiting any more
            pass

    # ---- closing --------------------------------------------------------------------------------

    def close(self, timeout: float = 30.0) -> None:
        """Refuse new requests, finish queued and running ones, then release every instance.

        Called off the event loop (the repository unloads on its pool): it waits up to ``timeout``
        for the queue to drain, answers whatever is still queued then with UNAVAILABLE, and waits
        for the instances to finish their last execution and close.
        """
        if self._closing:
            return
        self._closing = True
        _drain_or_abandon(self._loop, self._begin_drain, self._abandon, timeout)
        self._stop_instances(timeout)

    def _begin_drain(self, drained: threading.Event) -> None:
        self._drained = drained
        self._dispatch_due(_MONOTONIC_NS())
        self._check_drained()

    def _check_drained(self) -> None:
        if self._drained is not None and self._empty():
            self._drained.set()

    def _abandon(self) -> None:
        """Answer every request still queued: the model is going away without running them."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        error = f"model '{self._model_name}' was unloaded before the request could run"
        for entry in self._take_queued():
            self.stats.fail(FailureReason.OTHER, _MONOTONIC_NS() - entry.enqueue_ns)
            if not entry.future.done():
                entry.future.set_exception(UnavailableError(error))


def _drain_or_abandon(
    loop: asyncio.AbstractEventLoop | None,
    begin_drain: Callable[[threading.Event], None],
    abandon: Callable[[], None],
    timeout: float,
) -> None:
    """How a scheduler closes from off its event loop: ask the loop to run the queued work and
    signal when it has, and if that takes longer than ``timeout`` (or the loop is not running
    elsewhere) answer what is still queued right away."""
    if loop is None or loop.is_closed():
        return
    if loop.is_running() and not _on_loop(loop):
        drained = threading.Event()
        loop.call_soon_threadsafe(begin_drain, drained)
        if not drained.wait(timeout):
            loop.call_soon_threadsafe(abandon)
    else:
        abandon()


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
