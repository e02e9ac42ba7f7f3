"""One thread per model instance, taking executions from its scheduler's queue.

Backends are synchronous (they block in framework code), so each instance gets a dedicated thread and
the event loop only hands it work and is woken with the result.  A dedicated thread rather than a
shared pool keeps Triton's guarantee that one instance runs one execution at a time, and lets
frameworks that keep thread-local state (CUDA streams, Python model globals) find it on the same
thread every time.  Frameworks that release the GIL (ONNX Runtime, torch) and Python models in worker
processes therefore run ``count: N`` executions truly at once.

The threads of a model version's instances share one job queue, so whichever instance is free takes
the next execution.  A job cancelled while it waits there is dropped before it reaches the backend.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from naiad.backends.base import ExecuteResult, ModelInstance, Rescheduled
from naiad.core.errors import CancelledError, ErrorResponse, InferenceServerError, InternalError
from naiad.core.request import InferResponse
from naiad.core.verbose import state_change
from naiad.scheduling.queue import QueuedRequest
from naiad.scheduling.stats import FailureReason, SchedulerStats

if TYPE_CHECKING:
    from naiad.scheduling.rate_limiter import Gate

log = logging.getLogger("naiad.scheduling")


class Execution:
    """One batch on its way through an instance.

    The scheduler fills ``entries`` and ``dispatch_ns``; the instance's thread drops the requests
    cancelled meanwhile into ``skipped`` (they never reach the backend) and fills one result per
    remaining entry and its timings (``time.monotonic_ns``).  With ``keep_cancelled`` it drops none:
    the entries' positions in the batch mean something to the model (the direct sequence batcher puts
    each sequence at its slot's index), and removing one would move the others; the backend still
    sees the request's ``cancelled`` flag and may stop early.
    """

    __slots__ = (
        "dispatch_ns",
        "end_ns",
        "entries",
        "keep_cancelled",
        "results",
        "sequence",
        "skipped",
        "start_ns",
    )

    def __init__(
        self, entries: list[QueuedRequest], dispatch_ns: int, sequence: int, keep_cancelled: bool = False
    ) -> None:
        self.entries = entries
        self.dispatch_ns = dispatch_ns
        self.sequence = sequence
        self.keep_cancelled = keep_cancelled
        self.skipped: list[QueuedRequest] = []
        self.results: list[ExecuteResult] = []
        self.start_ns = 0
        self.end_ns = 0

    def skip_cancelled(self) -> list[QueuedRequest]:
        """Set aside the requests flagged cancelled before the execution starts (unless the batch
        keeps them in place); the entries left to run."""
        entries = self.entries
        if self.keep_cancelled:
            return entries
        for entry in entries:  # (a loop, not ``any``: no generator per execution on the common path)
            if entry.request.cancelled:
                self.skipped = [entry for entry in entries if entry.request.cancelled]
                entries = self.entries = [entry for entry in entries if not entry.request.cancelled]
                break
        return entries

    def drop_skipped(self, now: int, stats: SchedulerStats) -> None:
        """Count the requests skipped as cancelled, and answer those someone still waits for (a
        request cancelled through its flag, as a BLS caller cancels its call, not by its caller
        going away) with Triton's CANCELLED error."""
        for entry in self.skipped:
            stats.fail(FailureReason.CANCELED, now - entry.enqueue_ns)
            if not entry.future.done():
                entry.future.set_exception(CancelledError("Request was cancelled"))

    def settle(self, entry: QueuedRequest, result: ExecuteResult, now: int, stats: SchedulerStats) -> None:
        """Answer ``entry`` with ``result`` (delivered at ``now``) and count it, with this
        execution's timings: one place for every scheduler, so statistics, histograms and trace
        timestamps mean the same whichever scheduler ran the request."""
        future = entry.future
        elapsed = now - entry.enqueue_ns
        timestamps = entry.request.timestamps
        if timestamps is not None:  # a traced request: Triton's timestamps, monotonic ns
            timestamps += (
                ("QUEUE_START", entry.enqueue_ns),
                ("COMPUTE_START", self.dispatch_ns),
                ("COMPUTE_INPUT_END", self.start_ns),
                ("COMPUTE_OUTPUT_START", self.end_ns),
                ("COMPUTE_END", now),
            )
        if future.done():
            stats.fail(FailureReason.CANCELED, elapsed)
            return
        count_result(
            stats, result, entry.size, entry.enqueue_ns, self.dispatch_ns, self.start_ns, self.end_ns, now
        )
        if isinstance(result, InferResponse):
            future.set_result(result)
        else:
            future.set_exception(result)

    def count(self, entry: QueuedRequest, now: int, stats: SchedulerStats) -> None:
        """Count ``entry``'s run in this execution as a success (delivered at ``now``): an answered
        request, or one its model released for rescheduling (Triton counts each of its runs)."""
        count_run(stats, entry.size, entry.enqueue_ns, self.dispatch_ns, self.start_ns, self.end_ns, now)


def count_result(
    stats: SchedulerStats,
    result: ExecuteResult,
    size: int,
    enqueue_ns: int,
    dispatch_ns: int,
    start_ns: int,
    end_ns: int,
    now: int,
) -> None:
    """Count one request's result, delivered at ``now``, with its execution's timings: answered (an
    :class:`ErrorResponse` is an answer too, the model's own) or failed.  One place for every way a
    result reaches its caller (a future, or a callback: ``DynamicBatchScheduler.start_at_once``)."""
    if isinstance(result, InferResponse | ErrorResponse):
        if not isinstance(result, InferResponse):
            stats.error_response_count += 1
        count_run(stats, size, enqueue_ns, dispatch_ns, start_ns, end_ns, now)
        return
    if isinstance(result, Rescheduled):  # by a model whose scheduler cannot take it back
        log.error("Failed to release request: %s", result.message)  # (as Triton logs it)
    stats.fail(FailureReason.BACKEND, now - enqueue_ns)


def count_run(
    stats: SchedulerStats, size: int, enqueue_ns: int, dispatch_ns: int, start_ns: int, end_ns: int, now: int
) -> None:
    """Count one request's run as a success: its time queued (enqueued to dispatched), its
    execution's compute times (dispatched, started, ended) and the output time to ``now``."""
    elapsed = now - enqueue_ns
    queue_ns = dispatch_ns - enqueue_ns
    input_ns = start_ns - dispatch_ns
    infer_ns = end_ns - start_ns
    output_ns = now - end_ns
    stats.success_count += 1
    stats.inference_count += size
    stats.success_ns += elapsed
    stats.queue_ns += queue_ns
    stats.compute_input_ns += input_ns
    stats.compute_infer_ns += infer_ns
    stats.compute_output_ns += output_ns
    stats.observe(elapsed, queue_ns, input_ns, infer_ns, output_ns)


class GrowingExecution(Execution):
    """A batch that may still grow until its instance holds its rate-limiter resources.

    A batching scheduler hands a batch to an instance that is free; under the rate limiter that
    instance may then wait for resources another model holds.  Meanwhile the scheduler adds the
    requests that queue up (up to the model's ``max_batch_size``, same shapes), as Triton's payload
    takes requests until it is scheduled, so a batch the limiter delays still leaves full.  The
    instance's thread closes it once granted; ``lock`` makes adding and closing exclusive.
    """

    __slots__ = ("lock", "open", "size")

    def __init__(self, entries: list[QueuedRequest], dispatch_ns: int, sequence: int, size: int) -> None:
        super().__init__(entries, dispatch_ns, sequence)
        self.lock = threading.Lock()
        self.open = True
        #: Its batch size (the sum of its requests').
        self.size = size

    def close(self) -> None:
        with self.lock:
            self.open = False


Jobs = queue.SimpleQueue[Execution | None]


def log_executing(entries: list[QueuedRequest], name: str) -> None:
    """Triton's verbose lines as an instance starts an execution (``--log-verbose`` 1 and up)."""
    for entry in entries:
        log.debug(state_change(entry.request.id, "PENDING", "EXECUTING"))
    model = entries[0].request.model_name
    log.debug("model %s, instance %s, executing %d requests", model, name, len(entries))


def log_released(entries: list[QueuedRequest], name: str) -> None:
    """Triton's verbose lines once an execution's requests are released."""
    for entry in entries:
        log.debug(state_change(entry.request.id, "EXECUTING", "RELEASED"))
    released = "TRITONBACKEND_ModelInstanceExecute: model instance name %s released %d requests"
    log.debug(released, name, len(entries))


def _failure(exc: BaseException) -> InferenceServerError:
    """A fresh error per request: one exception object must not be raised in several tasks."""
    if isinstance(exc, InferenceServerError):
        return InferenceServerError(exc.message, exc.code)
    return InternalError(f"{type(exc).__name__}: {exc}")


class InstanceWorker:
    """A model instance and, once started, the thread that runs its executions in order.

    ``signature`` is what identifies the instance's configuration apart from its group's name and
    count (kind, device, rate limiter resources...): a version loaded again with only its instance
    groups changed keeps the instances whose signature it still has (Triton's instance update).  The
    new version's worker then takes the instance over (:meth:`successor`): ``kept`` tells the old
    worker's thread not to close it, and the new worker's thread starts once the old one ended, so
    the instance never runs executions of both versions at once.
    """

    def __init__(self, instance: ModelInstance, name: str, signature: str = "") -> None:
        self.instance = instance
        self.name = name
        self.signature = signature
        self.kept = False
        self._predecessor: InstanceWorker | None = None
        #: Requests this instance's thread has taken from the job queue (written by that thread only).
        self.started = 0
        #: The rate limiter's gate for this instance (``None``: it runs whenever it is free).
        self.gate: Gate | None = None
        #: When its last execution ended, for an instance the event loop drives (see
        #: ``LoopScheduler._start_on``): the next one sent ahead starts then.
        self.last_end_ns = 0
        self._thread: threading.Thread | None = None

    def ended(self, dispatch_ns: int, start_ns: int, end_ns: int) -> tuple[int, int]:
        """An execution the event loop sent this instance at ``start_ns`` (dispatched at
        ``dispatch_ns``) ended at ``end_ns``: when it was dispatched and started, as counted.  The
        instance runs the executions it was sent one after another: one sent ahead starts when the
        one before it ended, and waited for the instance until then (queue time, as for a request
        queued in the scheduler), so compute times stay those of the execution alone."""
        last = self.last_end_ns
        self.last_end_ns = end_ns
        if last > start_ns:
            return max(dispatch_ns, last), last
        return dispatch_ns, start_ns

    def start(self, jobs: Jobs, finished: Callable[[Execution], None]) -> None:
        """Run executions from ``jobs`` until a ``None``; ``finished`` is called (on this thread)
        after each, and must be safe to call from any thread."""
        self._thread = threading.Thread(
            target=self._run, args=(jobs, finished), name=f"naiad-{self.name}", daemon=True
        )
        self._thread.start()

    def successor(self) -> InstanceWorker:
        """A worker for this worker's instance in a new version of the model (see the class)."""
        self.kept = True
        worker = InstanceWorker(self.instance, self.name, self.signature)
        worker._predecessor = self
        return worker

    def _run(self, jobs: Jobs, finished: Callable[[Execution], None]) -> None:
        instance = self.instance
        if self._predecessor is not None:  # the old version's last executions on it come first
            self._predecessor.join(None)
            self._predecessor = None
        gate = self.gate
        try:
            while True:
                execution = self._next(jobs)
                if execution is None:
                    return
                held = False
                if gate is not None and isinstance(execution, GrowingExecution):  # (grows while this waits)
                    gate.acquire()
                    execution.close()
                    execution.dispatch_ns = time.monotonic_ns()
                    held = True
                self.started += len(execution.entries)
                entries = execution.skip_cancelled()
                if gate is not None and not held:
                    if entries:
                        gate.acquire()  # the rate limiter: wait until this instance's resources are free
                        execution.dispatch_ns = time.monotonic_ns()  # so the wait counts as queueing
                    else:
                        gate.withdraw()
                execution.start_ns = time.monotonic_ns()
                if entries:
                    execution.results = self.run_batch(instance, entries, self.name)
                if gate is not None:
                    gate.release(again=not jobs.empty())  # (more queued: ask again in the same step)
                execution.end_ns = time.monotonic_ns()
                finished(execution)
        finally:
            if not self.kept:
                instance.close()
            if self.gate is not None:  # (a successor has a gate of its own)
                self.gate.retire()

    def _next(self, jobs: Jobs) -> Execution | None:
        """The next job; one this instance asked the rate limiter for on release may have gone to
        another instance of the model meanwhile, and then the request is taken back before waiting."""
        gate = self.gate
        if gate is not None and gate.staged is not None:
            try:
                return jobs.get_nowait()
            except queue.Empty:
                gate.withdraw()
        return jobs.get()

    @staticmethod
    def run_batch(instance: ModelInstance, entries: list[QueuedRequest], name: str) -> list[ExecuteResult]:
        """One result per entry, whatever the backend does: an exception fails the whole batch.

        ``name`` is the instance's, for Triton's verbose lines around each execution."""
        verbose = log.isEnabledFor(logging.DEBUG)
        if verbose:
            log_executing(entries, name)
        try:
            results = instance.execute([entry.request for entry in entries])
        except BaseException as exc:  # handed to the requests, never lost on this thread
            return [_failure(exc) for _ in entries]
        finally:
            if verbose:
                log_released(entries, name)
        if len(results) != len(entries):
            message = f"backend returned {len(results)} responses for {len(entries)} requests"
            return [InternalError(message) for _ in entries]
        return results

    def join(self, timeout: float | None) -> None:
        """Wait for the thread to finish its work and release the instance."""
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def taken_over(self) -> bool:
        """Whether this worker took its instance over from an older version's (:meth:`successor`)."""
        return self._predecessor is not None

    def close(self) -> None:
        """Release a worker that never started (a version whose load failed midway); an instance
        taken over stays with the version it came from."""
        if self._thread is None and not self.kept and self._predecessor is None:
            self.instance.close()
        if self._thread is None and self.gate is not None:
            self.gate.retire()
