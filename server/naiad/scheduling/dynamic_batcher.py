"""The scheduler of a model version: a queue on the event loop feeding the version's instances.

As in Triton, one engine serves every model that is not a sequence or ensemble model: with a
``dynamic_batching`` section it queues requests by priority level under the queue policies and forms
batches (:mod:`naiad.scheduling.batcher`); without one (Triton's default scheduler) each request is
its own execution, first come first served.  Requests wait in one queue per model version, not per
instance, so whichever instance frees up first takes the next batch, and with batching a batch is
formed only when an instance is free, so it grows while every instance is busy: that is what makes
batching pay under load.

All state lives on the event loop thread: ``submit`` queues, instance threads hand back finished
executions with ``call_soon_threadsafe``, and a single timer wakes the scheduler for a batch delay
or a queue timeout.  So there are no locks (but one per batch that waits for the rate limiter,
which grows until its instance's thread closes it: :class:`~naiad.scheduling.worker.GrowingExecution`),
and counting for :class:`SchedulerStats` is plain adds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import cast

from naiad.backends.base import ExecuteResult
from naiad.core.errors import InternalError, UnavailableError
from naiad.core.request import InferRequest, InferResponse
from naiad.scheduling.batcher import next_batch
from naiad.scheduling.loop_scheduler import LoopDriven, LoopScheduler, loop_driven
from naiad.scheduling.policy import PriorityLevels, SchedulingPolicy
from naiad.scheduling.queue import TAKEN, QueuedRequest, RequestQueue
from naiad.scheduling.scheduler import Waiter
from naiad.scheduling.start_delay import NO_DELAY, StartDelay
from naiad.scheduling.stats import FailureReason, SchedulerStats
from naiad.scheduling.worker import Execution, GrowingExecution, InstanceWorker, Jobs, count_result

log = logging.getLogger("naiad.scheduling")

_MONOTONIC_NS = time.monotonic_ns
#: Inline execution (``_run_inline``) only while executions average less than this.
_INLINE_LIMIT_NS = 50_000
#: Where the running average starts: about 70 executions on the thread before any runs inline.
_INLINE_WARMUP_NS = 1_000_000_000


class DynamicBatchScheduler(LoopScheduler):
    """Queues, batches and runs the requests of one model version on its instances."""

    def __init__(
        self, policy: SchedulingPolicy, workers: Sequence[InstanceWorker], start_delay: StartDelay = NO_DELAY
    ) -> None:
        """Start one thread per instance; may run off the event loop (models load on a pool).

        ``start_delay.queued``: hold every request in the queue until that many wait there, then
        run as usual (Triton's ``TRITONSERVER_DELAY_SCHEDULER``; see :mod:`.start_delay`)."""
        if not workers:
            raise ValueError("a scheduler needs at least one instance")
        super().__init__(policy.model_name)
        self.policy = policy
        self._workers = list(workers)
        self._queue = RequestQueue(policy.levels)
        self._jobs: Jobs = Jobs()
        # Without batching or queue policies the queue is first come, first served, and then the
        # instances' own job queue is the queue: requests go straight to it, so an instance's
        # thread goes from one execution to the next without waiting for the event loop (that
        # hop per request would cost a third of the throughput of small models).  Otherwise a
        # batch is formed only when an instance is free, so that it grows while all are busy.
        self._direct = not policy.batching and policy.levels == PriorityLevels()
        # A single instance that says it is safe to run on the loop (see ``_run_inline``) does so
        # while its executions stay shorter than _INLINE_LIMIT_NS on average.
        # (Not an instance taken over from an older version, whose last execution may still run on
        # the instance's old thread: the loop would run the model at the same time.)
        self._inline = (
            self._direct
            and len(self._workers) == 1
            and bool(getattr(self._workers[0].instance, "inline_safe", False))
            and not self._workers[0].taken_over
        )
        # Instances whose model runs in model processes that can be driven from the loop (see
        # ``_start_on_loop``) take executions without their threads: no hand-off per execution,
        # and without batching (where requests are not queued here) several executions sent ahead
        # per write and per wake-up of each process.  With batching or queue policies a batch is
        # still formed only when an instance is free.  Not under the rate limiter, whose gate an
        # instance's thread waits for.
        self._on_loop = all(loop_driven(worker) for worker in self._workers)
        #: Those instances as the loop drives them, beside their workers (``_choose``, per request).
        self._driven = [(w, cast(LoopDriven, w.instance)) for w in self._workers] if self._on_loop else []
        # Where a request always starts at once on a loop-driven instance, ``start_at_once`` may
        # start it without a queue entry, a future or a coroutine (see there).
        self._at_once = self._direct and self._on_loop and not self._inline and not policy.preserve_ordering
        # Batches handed to instances that wait for the rate limiter grow until it lets them run
        # (``GrowingExecution``); those still open, oldest first.
        self._grows = policy.batching and any(worker.gate is not None for worker in self._workers)
        self._growing: list[GrowingExecution] = []
        self._infer_average_ns = _INLINE_WARMUP_NS
        self._idle = len(self._workers)
        self._running = 0
        self._handed = 0
        self.stats = SchedulerStats(self._pending)
        self._keyed = policy.keyed
        self._sequence = 0
        self._next_delivery = 0
        self._finished_out_of_order: dict[int, Execution] = {}
        self._delay = start_delay.queued
        if policy.dynamic_batching:  # (Triton's batcher thread runs at nice 0 and says so)
            log.debug("Starting dynamic-batcher thread for %s at nice 0...", self._model_name)
        if self._delay:
            log.debug(
                "Delaying batcher thread for %s until %d queued requests...", self._model_name, self._delay
            )
        for worker in self._workers:
            worker.start(self._jobs, self._finished_threadsafe)

    # ---- requests -------------------------------------------------------------------------------

    async def submit(self, request: InferRequest) -> InferResponse:
        """Queue ``request`` and return its response; UNAVAILABLE when the queue policy refuses it.

        A caller that is cancelled while the request waits takes it out of the queue (it never
        reaches the model); once it runs, ``request.cancelled`` lets the model see it.
        """
        if self._closing:
            raise UnavailableError(f"model '{self.policy.model_name}' is unloading")
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        now = _MONOTONIC_NS()
        policy = self.policy
        entry = QueuedRequest(request, loop.create_future(), now)
        queue = self._queue
        if policy.batching:
            entry.size = request.batch_size
            if self._keyed:
                entry.shape_key = policy.shape_key(request)
        if self._delay:
            self._hold(entry, now)
        elif self._inline and not self._running and self._infer_average_ns < _INLINE_LIMIT_NS:
            self._run_inline(entry, now)
        elif self._direct or (
            self._idle and not len(queue) and (not policy.batching or not policy.max_queue_delay_ns)
        ):
            entry.state = TAKEN
            self._run([entry], now)
        else:
            entry.level = policy.level_of(request.priority)
            try:
                queue.push(entry, now)
            except UnavailableError:
                self.stats.fail(FailureReason.REJECTED, 0)
                raise
            self._dispatch_due(now)
        try:
            return await entry.future
        except asyncio.CancelledError:
            if queue.remove(entry):
                self.stats.fail(FailureReason.CANCELED, _MONOTONIC_NS() - now)
                if self._drained is not None:
                    self._check_drained()
            else:  # already with an instance: counted when its execution finishes
                request.cancel()
            raise
        finally:
            # a failed request's error holds this frame (its traceback), the frame the entry and the
            # entry's future the error: without the entry, reference counting frees them all
            del entry

    def _hold(self, entry: QueuedRequest, now: int) -> None:
        """Queue ``entry`` while the start delay lasts; once enough wait, run them as batching says."""
        entry.level = self.policy.level_of(entry.request.priority)
        try:
            self._queue.push(entry, now)
        except UnavailableError:
            self.stats.fail(FailureReason.REJECTED, 0)
            raise
        if len(self._queue) >= self._delay:
            self._delay = 0
        self._dispatch_due(now)

    # ---- dispatch -------------------------------------------------------------------------------

    def _dispatch_due(self, now: int) -> None:
        """Hand batches to free instances while the batching rule says so, then arm the timer."""
        queue = self._queue
        self._expire(now)
        # (first come, first served: what a start delay held goes to the instances at once, in order,
        # as the requests after it do, which would otherwise overtake it)
        while (self._idle or self._direct) and len(queue) and (not self._delay or self._closing):
            count, wake_ns = next_batch(queue.entries(), self.policy, now, self._closing)
            if not count:
                self._arm(wake_ns)
                break
            self._run(queue.take(count), now)
        if self._growing and len(queue):
            self._grow()
        deadline = queue.next_deadline()
        if deadline:
            self._arm(deadline)

    def _run(self, entries: list[QueuedRequest], now: int) -> None:
        self._idle -= 1
        self._running += 1
        self._handed += len(entries)
        execution: Execution
        if self._grows:
            grown = GrowingExecution(entries, now, self._sequence, sum(entry.size for entry in entries))
            self._growing.append(grown)
            execution = grown
        else:
            execution = Execution(entries, now, self._sequence)
        self._sequence += 1
        if self._on_loop:
            self._start_on_loop(execution)
        else:
            self._jobs.put(execution)

    def _grow(self) -> None:
        """Add what is queued to the batches still waiting for the rate limiter, oldest first, in
        queue order, while it fits (``max_batch_size``, the batch's shapes)."""
        queue = self._queue
        max_batch = self.policy.max_batch_size
        for execution in self._growing:  # (each leaves the list when it finishes)
            with execution.lock:
                if not execution.open:
                    continue
                size, count = execution.size, 0
                key = execution.entries[0].shape_key
                for entry in queue.entries():
                    if size + entry.size > max_batch or entry.shape_key != key:
                        break
                    size += entry.size
                    count += 1
                if count:
                    execution.entries += queue.take(count)
                    execution.size = size
                    self._handed += count
            if not len(queue):
                break

    def _start_on_loop(self, execution: Execution) -> None:
        """Hand ``execution`` to a loop-driven instance (``LoopScheduler._start_on``).  Without
        batching executions are sent ahead (up to ``PIPELINE`` per instance); with it, one comes only
        when an instance is free (``_dispatch_due``), so that a batch grows while every instance is
        busy.

        Of several instances, the one with the fewest executions outstanding takes it (the first
        of those: a lone client keeps one process warm), passing over those whose process is
        restarting while another serves: a crash then fails only the requests its process held.
        (Triton 2.51 goes on giving every other request to an instance whose stub died, which
        fails it with "Stub process '...' is not healthy.": 10 of 20, checked side by side.)
        """
        self._start_on(self._choose()[0], execution)

    def _choose(self) -> tuple[InstanceWorker, LoopDriven]:
        """The loop-driven instance that takes the next execution (see ``_start_on_loop``), with its
        worker."""
        driven = self._driven
        worker, instance = driven[0]
        if len(driven) > 1:
            fewest = -1
            for candidate, candidate_instance in driven:
                load = candidate_instance.load  # (-1: its process is restarting)
                if load >= 0 and (fewest < 0 or load < fewest):
                    worker, instance, fewest = candidate, candidate_instance, load
        return worker, instance

    @property
    def starts_at_once(self) -> bool:
        return self._at_once

    def start_at_once(self, request: InferRequest, waiter: Waiter) -> bool:
        """Start ``request`` on an instance now, as :meth:`submit` would, and give ``waiter`` its
        result; False, with nothing done, where ``submit`` would not start it at once (a queue, a
        start delay, an instance the loop does not drive, closing, verbose logging).

        What ``submit`` does for such a request, without its queue entry, future and coroutine, and
        without an :class:`Execution`: the same choice of instance, the same counters (so pending
        counts, draining and closing see it), the same statistics (``count_result``).  That machinery
        was 13-21% of the engine's CPU per request to a model process (``benchmarks/scaling``,
        forty-fourth session), where a frontend worker's requests are most of the engine's work.
        """
        if not self._at_once or self._closing or self._delay or log.isEnabledFor(logging.DEBUG):
            return False
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        enqueue_ns = _MONOTONIC_NS()
        worker, instance = self._choose()
        self._idle -= 1
        self._running += 1
        self._handed += 1
        self._sequence += 1
        worker.started += 1
        start_ns = _MONOTONIC_NS()
        started = False

        def done(results: list[ExecuteResult]) -> None:
            end_ns = _MONOTONIC_NS()
            result = results[0] if len(results) == 1 else _miscounted(results)
            dispatch_ns, begin_ns = worker.ended(enqueue_ns, start_ns, end_ns)
            if started:
                self._finish_at_once(waiter, result, enqueue_ns, dispatch_ns, begin_ns, end_ns)
            else:  # failed at once (its process is restarting): answered on the next iteration
                loop.call_soon(
                    self._finish_at_once, waiter, result, enqueue_ns, dispatch_ns, begin_ns, end_ns
                )

        try:
            instance.start_on_loop([request], done)
        except Exception as error:  # (it could not be sent: it fails, as the caller's coroutine words it)
            log.exception("starting a request of model '%s' failed", self.policy.model_name)
            done([InternalError(f"internal error: {type(error).__name__}: {error}")])
        started = True
        return True

    def _finish_at_once(
        self,
        waiter: Waiter,
        result: ExecuteResult,
        enqueue_ns: int,
        dispatch_ns: int,
        start_ns: int,
        end_ns: int,
    ) -> None:
        """``_finished`` and ``_deliver`` for a request :meth:`start_at_once` started."""
        self._idle += 1
        self._running -= 1
        now = _MONOTONIC_NS()
        stats = self.stats
        stats.execution(1, start_ns - dispatch_ns, end_ns - start_ns, now - end_ns)
        stats.last_inference_ms = time.time_ns() // 1_000_000
        if waiter.abandoned:
            stats.fail(FailureReason.CANCELED, now - enqueue_ns)
        else:
            count_result(stats, result, 1, enqueue_ns, dispatch_ns, start_ns, end_ns, now)
            waiter.settle(result)
        if len(self._queue):
            self._dispatch_due(now)
        if self._drained is not None:
            self._check_drained()

    def _run_inline(self, entry: QueuedRequest, now: int) -> None:
        """Execute on the event loop thread and settle ``entry`` at once.

        Only for an idle single instance that is ``inline_safe`` and whose executions are short:
        a few microseconds of model code then cost no thread hand-off at all, and a slow execution
        raises the running average so the next requests go back to the instance's thread.
        """
        execution = Execution([entry], now, self._sequence)
        self._sequence += 1
        entry.state = TAKEN
        execution.start_ns = _MONOTONIC_NS()
        worker = self._workers[0]
        execution.results = InstanceWorker.run_batch(worker.instance, [entry], worker.name)
        execution.end_ns = _MONOTONIC_NS()
        self._deliver(execution, execution.end_ns)

    def _pending(self) -> int:
        """Requests queued here or in the job queue, not yet taken by an instance, or taken by one
        driven from the loop whose model process has not started them yet (sent ahead)."""
        pending = len(self._queue) + self._handed - sum(worker.started for worker in self._workers)
        if self._on_loop:
            pending += sum(cast(LoopDriven, worker.instance).waiting for worker in self._workers)
        return pending

    def _expire(self, now: int) -> None:
        """Answer the requests whose queue timeout passed (REJECT); DELAY ones just move back."""
        for entry in self._queue.expire(now):
            self.stats.fail(FailureReason.REJECTED, now - entry.enqueue_ns)
            if not entry.future.done():
                entry.future.set_exception(UnavailableError("Request timeout expired"))

    # ---- results --------------------------------------------------------------------------------

    def _finished(self, execution: Execution) -> None:
        if self._growing and execution in self._growing:
            self._growing.remove(execution)
        self._idle += 1
        self._running -= 1
        now = _MONOTONIC_NS()
        if self.policy.preserve_ordering:
            ready = self._finished_out_of_order
            ready[execution.sequence] = execution
            while self._next_delivery in ready:
                self._deliver(ready.pop(self._next_delivery), now)
                self._next_delivery += 1
        else:
            self._deliver(execution, now)
        self._dispatch_due(now)
        if self._drained is not None:
            self._check_drained()

    def _deliver(self, execution: Execution, now: int) -> None:
        stats = self.stats
        entries = execution.entries
        execution.drop_skipped(now, stats)
        if not entries:
            return
        input_ns = execution.start_ns - execution.dispatch_ns
        infer_ns = execution.end_ns - execution.start_ns
        self._infer_average_ns += (infer_ns - self._infer_average_ns) >> 3
        output_ns = now - execution.end_ns
        size = entries[0].size if len(entries) == 1 else sum(entry.size for entry in entries)
        stats.execution(size, input_ns, infer_ns, output_ns)
        stats.last_inference_ms = time.time_ns() // 1_000_000
        for entry, result in zip(entries, execution.results, strict=True):
            execution.settle(entry, result, now, stats)

    # ---- closing --------------------------------------------------------------------------------

    def _empty(self) -> bool:
        return not len(self._queue) and not self._running

    def _take_queued(self) -> list[QueuedRequest]:
        return self._queue.take(len(self._queue))

    def _stop_instances(self, timeout: float) -> None:
        if self.policy.dynamic_batching:  # (the queue is drained: Triton's batcher thread ends here)
            log.debug("Stopping dynamic-batcher thread for %s...", self._model_name)
        for _ in self._workers:
            self._jobs.put(None)
        for worker in self._workers:
            worker.join(timeout)


def _miscounted(results: list[ExecuteResult]) -> ExecuteResult:
    """A backend that answered one request with another count of results fails it (as ``_start_on``)."""
    return InternalError(f"backend returned {len(results)} responses for 1 requests")
