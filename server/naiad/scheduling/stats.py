"""What a model version's scheduler counts, for the statistics extension and the Prometheus metrics.

One :class:`SchedulerStats` per model version, reachable as ``version.scheduler.stats``.  Every field
is a plain integer written only by the event-loop thread (worker threads hand their timings back to
the loop with the results), so recording costs a few additions and no lock, and a reader on the loop
(the metrics endpoint, the statistics handlers) always sees consistent values.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from enum import Enum

#: Upper bounds (ns) of the latency histogram buckets, 50 µs to 60 s; one more bucket counts the rest.
#: Fixed, so that histograms of every model and every pod can be summed (and p99 computed across them).
LATENCY_BUCKETS_NS: tuple[int, ...] = (
    50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 25_000_000, 50_000_000, 100_000_000, 250_000_000,
    500_000_000, 1_000_000_000, 2_500_000_000, 5_000_000_000, 10_000_000_000, 30_000_000_000,
    60_000_000_000,
)  # fmt: skip
_FIRST_BUCKET_NS = LATENCY_BUCKETS_NS[0]

#: Triton's default bounds (ms) of ``nv_inference_first_response_histogram_ms`` (a model's
#: ``model_metrics`` may set others).
FIRST_RESPONSE_BOUNDS_MS: tuple[float, ...] = (100, 500, 2000, 5000)
FIRST_RESPONSE_FAMILY = "nv_inference_first_response_histogram_ms"

#: One successful request's durations for the latency summaries: (monotonic ns when recorded, request,
#: queue, compute input, compute infer, compute output), all ns; the compute ones are :data:`NOT_COMPUTED`
#: for a request answered from the response cache (Triton's compute summaries leave those out).
Sample = tuple[int, int, int, int, int, int]
NOT_COMPUTED = -1


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
      ``failures`` splits the count by :class:`FailureReason` (every reason is always a key);
    * ``error_response_count``: successful requests whose response was an error the model gave
      (:class:`~naiad.core.errors.ErrorResponse`; a success as Triton counts it, an error to a client).

    Executions: ``execution_count`` (model executions), ``inference_count`` (batch elements of the
    successful requests, as Triton counts them: a batch of a 1- and an 8-request counts 9, a failed
    request nothing; checked side by side with Triton 2.51), ``batches`` (batch size -> :class:`BatchStats`),
    ``last_inference_ms`` (wall-clock ms of the last execution's end, 0 if none).

    Gauge: ``pending`` (requests waiting for an instance to take them), computed when read.

    Response cache (:mod:`naiad.scheduling.cache`): ``cache_hit_count``/``cache_hit_ns`` (requests
    answered from the cache, and the lookups' time) and ``cache_miss_count``/``cache_miss_ns``
    (requests the cache could not answer, and the time spent looking up and inserting).  A hit also
    counts as a success, as in Triton; it never reaches the execution counters.

    Latency distributions of successful requests, recorded by :meth:`observe` (a scheduler calls it
    once per successful request, next to ``success_count``): ``request_buckets``, ``queue_buckets``
    and ``compute_buckets`` (compute input + infer + output) count requests per
    :data:`LATENCY_BUCKETS_NS` bucket (not cumulative; the last one is +Inf), so each sums to
    ``success_count``; ``samples`` keeps the recent requests' durations for quantile summaries, only
    when :attr:`samples_kept` is set (``--metrics-config summary_latencies=true``), else ``None``.
    """

    #: How many recent requests each version keeps for summaries (0: none); set once at start-up.
    samples_kept = 0
    #: Whether schedulers count their versions' first responses (``--metrics-config
    #: histogram_latencies=true``, Triton's first-response histogram); set once at start-up.
    first_responses = False

    __slots__ = (
        "_pending",
        "batches",
        "cache_hit_count",
        "cache_hit_ns",
        "cache_miss_count",
        "cache_miss_ns",
        "compute_buckets",
        "compute_infer_ns",
        "compute_input_ns",
        "compute_output_ns",
        "error_response_count",
        "execution_count",
        "failure_count",
        "failure_ns",
        "failures",
        "first_response_bounds",
        "first_response_buckets",
        "first_response_in_observe",
        "first_response_ms",
        "inference_count",
        "last_inference_ms",
        "queue_buckets",
        "queue_ns",
        "request_buckets",
        "samples",
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
        self.error_response_count = 0
        self.execution_count = 0
        self.inference_count = 0
        self.batches: dict[int, BatchStats] = {}
        self.last_inference_ms = 0
        self.cache_hit_count = 0
        self.cache_hit_ns = 0
        self.cache_miss_count = 0
        self.cache_miss_ns = 0
        buckets = len(LATENCY_BUCKETS_NS) + 1
        self.request_buckets = [0] * buckets
        self.queue_buckets = [0] * buckets
        self.compute_buckets = [0] * buckets
        kept = SchedulerStats.samples_kept
        self.samples: deque[Sample] | None = deque(maxlen=kept) if kept else None
        self.first_response_bounds: tuple[float, ...] = FIRST_RESPONSE_BOUNDS_MS
        self.first_response_buckets: list[int] | None = None
        self.first_response_in_observe = True
        self.first_response_ms = 0

    def count_first_responses(self, bounds: tuple[float, ...], decoupled: bool) -> None:
        """Count each request's time to its first response in buckets with upper ``bounds`` (ms; one
        more counts the rest): at its success, or for a ``decoupled`` model, whose first response
        comes before the end, where the data plane sees it (:meth:`first_response`)."""
        self.first_response_bounds = bounds
        self.first_response_buckets = [0] * (len(bounds) + 1)
        self.first_response_in_observe = not decoupled

    @property
    def pending(self) -> int:
        return self._pending()

    def carry_over(self, old: SchedulerStats) -> None:
        """Start from ``old``'s counts: a version whose instances were updated in place is the same
        version to its statistics and metrics, as in Triton (requests the old scheduler still
        finishes afterwards stay with it)."""
        for name in SchedulerStats.__slots__:
            if name in ("_pending", "samples", "batches"):
                continue
            value = getattr(old, name)
            if isinstance(value, list | dict):
                value = value.copy()
            setattr(self, name, value)
        for size, batch in old.batches.items():
            copy = self.batches[size] = BatchStats()
            copy.count = batch.count
            copy.compute_input_ns = batch.compute_input_ns
            copy.compute_infer_ns = batch.compute_infer_ns
            copy.compute_output_ns = batch.compute_output_ns

    def fail(self, reason: FailureReason, duration_ns: int) -> None:
        """Count one failed request."""
        self.failure_count += 1
        self.failure_ns += duration_ns
        self.failures[reason] += 1

    def cache_hit(self, duration_ns: int) -> None:
        """Count one request answered from the response cache (a success that never queued)."""
        self.cache_hit_count += 1
        self.cache_hit_ns += duration_ns
        self.success_count += 1
        self.success_ns += duration_ns
        self.observe(duration_ns, 0, NOT_COMPUTED, NOT_COMPUTED, NOT_COMPUTED)

    def cache_miss(self, duration_ns: int) -> None:
        """Count one request the response cache could not answer (lookup and insert time)."""
        self.cache_miss_count += 1
        self.cache_miss_ns += duration_ns

    def execution(self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        """Count one model execution of ``batch_size`` elements (``inference_count`` counts them as
        their requests succeed)."""
        self.execution_count += 1
        batch = self.batches.get(batch_size)
        if batch is None:
            batch = self.batches[batch_size] = BatchStats()
        batch.count += 1
        batch.compute_input_ns += input_ns
        batch.compute_infer_ns += infer_ns
        batch.compute_output_ns += output_ns

    def observe(self, request_ns: int, queue_ns: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        """Bucket one successful request's durations (a few C-level bisects and adds; none for a
        duration in the first bucket, where a light model's requests and queue times all fall)."""
        first = _FIRST_BUCKET_NS
        compute_ns = input_ns + infer_ns + output_ns
        self.request_buckets[0 if request_ns <= first else bisect_left(LATENCY_BUCKETS_NS, request_ns)] += 1
        self.queue_buckets[0 if queue_ns <= first else bisect_left(LATENCY_BUCKETS_NS, queue_ns)] += 1
        self.compute_buckets[0 if compute_ns <= first else bisect_left(LATENCY_BUCKETS_NS, compute_ns)] += 1
        samples = self.samples
        if samples is not None:
            samples.append((time.monotonic_ns(), request_ns, queue_ns, input_ns, infer_ns, output_ns))
        if self.first_response_buckets is not None and self.first_response_in_observe:
            self.first_response(request_ns)

    def first_response(self, elapsed_ns: int) -> None:
        """Count one request's first response, ``elapsed_ns`` after it came (in whole milliseconds,
        as Triton counts them)."""
        buckets = self.first_response_buckets
        if buckets is not None:
            ms = elapsed_ns // 1_000_000
            buckets[bisect_left(self.first_response_bounds, ms)] += 1
            self.first_response_ms += ms
