"""What a model version's scheduler counts, for the statistics extension and the Prometheus metrics.

One :class:`SchedulerStats` per model version, reachable as ``version.scheduler.stats``.  Every field
is a plain integer written only by the event-loop thread (worker threads hand their timings back to
the loop with the results), so recording costs a few additions and no lock, and a reader on the loop
(the metrics endpoint, the statistics handlers) always sees consistent values.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum


class FailureReason(Enum):
    """Why a request failed, as Triton's ``nv_inference_request_failure`` ``reason`` label says."""

    REJECTED = "REJECTED"  # the queue was full, or the request's queue timeout expired
    CANCELED = "CANCELED"  # the client went away (disconnect, gRPC cancel) before its response
    BACKEND = "BACKEND"  # the model failed the request, or raised for its batch
    OTHER = "OTHER"  # anything else (the model was unloading...)


class BatchStats:
    """Executions of one batch size: count and summed compute durations (ns)."""

    __slots__ = ("compute_infer_ns", "compute_input_ns", "compute_output_ns", "count")

    def __init__(self) -> None:
        self.count = 0
        self.compute_input_ns = 0
        self.compute_infer_ns = 0
        self.compute_output_ns = 0


class SchedulerStats:
    """Cumulative counters of one model version since it loaded (durations in nanoseconds).

    Requests (Triton's ``inference_stats``; each successful request adds its own durations):

    * ``success_count``, ``success_ns``: requests answered with outputs, and their summed end-to-end
      time in the scheduler (submit to response);
    * ``queue_ns``: summed time successful requests waited in the queue before an instance took them;
    * ``compute_input_ns``: summed time from an instance being handed the batch to the model starting
      (handing inputs over: the thread hop, or the shared-memory copy for a worker process);
    * ``compute_infer_ns``: summed time the backend's ``execute`` took for the request's batch;
    * ``compute_output_ns``: summed time from ``execute`` returning to the response being delivered;
    * ``failure_count``, ``failure_ns``: failed requests and their summed time in the scheduler;
      ``failures`` splits the count by :class:`FailureReason` (every reason is always a key).

    Executions: ``execution_count`` (model executions), ``inference_count`` (batch elements executed,
    so a batch of a 1- and an 8-request counts 9), ``batches`` (batch size -> :class:`BatchStats`),
    ``last_inference_ms`` (wall-clock ms of the last execution's end, 0 if none).

    Gauge: ``pending`` (requests waiting for an instance to take them), computed when read.
    """

    __slots__ = (
        "_pending",
        "batches",
        "compute_infer_ns",
        "compute_input_ns",
        "compute_output_ns",
        "execution_count",
        "failure_count",
        "failure_ns",
        "failures",
        "inference_count",
        "last_inference_ms",
        "queue_ns",
        "success_count",
        "success_ns",
    )

    def __init__(self, pending: Callable[[], int]) -> None:
        self._pending = pending
        self.success_count = 0
        self.success_ns = 0
        self.queue_ns = 0
        self.compute_input_ns = 0
        self.compute_infer_ns = 0
        self.compute_output_ns = 0
        self.failure_count = 0
        self.failure_ns = 0
        self.failures: dict[FailureReason, int] = dict.fromkeys(FailureReason, 0)
        self.execution_count = 0
        self.inference_count = 0
        self.batches: dict[int, BatchStats] = {}
        self.last_inference_ms = 0

    @property
    def pending(self) -> int:
        return self._pending()

    def fail(self, reason: FailureReason, duration_ns: int) -> None:
        """Count one failed request."""
        self.failure_count += 1
        self.failure_ns += duration_ns
        self.failures[reason] += 1

    def execution(self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        """Count one model execution of ``batch_size`` elements."""
        self.execution_count += 1
        self.inference_count += batch_size
        batch = self.batches.get(batch_size)
        if batch is None:
            batch = self.batches[batch_size] = BatchStats()
        batch.count += 1
        batch.compute_input_ns += input_ns
        batch.compute_infer_ns += infer_ns
        batch.compute_output_ns += output_ns
