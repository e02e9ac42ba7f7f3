"""Per-model-version metrics, read from each version's scheduler counters when ``/metrics`` is scraped.

Triton's families keep Triton's names, types, help texts and labels (``model``, ``version``, and
``reason`` on failures), with Triton's counting: requests for success and failure, batch elements
for ``nv_inference_count``, model executions for ``nv_inference_exec_count``.  A version is reported
while it holds instances (from READY until its unload finishes), as Triton does.  Beyond Triton:
latency histograms (``*_histogram_ms``), the model state, load duration and loaded-memory gauges.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from naiad.metrics.config import MetricsConfig
from naiad.metrics.exposition import Prerendered, render_samples
from naiad.repository.manager import ModelRepository
from naiad.repository.model import ModelState, ModelVersion
from naiad.scheduling.stats import LATENCY_BUCKETS_NS, NOT_COMPUTED, FailureReason, SchedulerStats

#: Summaries report quantiles of the requests of the last minute (as prometheus-cpp's default window).
SUMMARY_WINDOW_NS = 60_000_000_000
#: Requests kept per version for summaries: the window is the last minute or these many, if fewer.
SUMMARY_SAMPLES = 8192

_Labels = dict[str, str]
_Read = Callable[[SchedulerStats], float]

#: (name, help, value): Triton's counters, in Triton's order.
_COUNTS: tuple[tuple[str, str, _Read], ...] = (
    (
        "nv_inference_count",
        "Number of inferences performed (does not include cached requests)",
        lambda s: s.inference_count,
    ),
    (
        "nv_inference_exec_count",
        "Number of model executions performed (does not include cached requests)",
        lambda s: s.execution_count,
    ),
)
_DURATIONS: tuple[tuple[str, str, _Read], ...] = (
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
        lambda s: s.success_ns // 1000,
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
        lambda s: s.queue_ns // 1000,
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        lambda s: s.compute_input_ns // 1000,
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        lambda s: s.compute_infer_ns // 1000,
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        lambda s: s.compute_output_ns // 1000,
    ),
)
#: (name, help, value): Triton's response cache counters, for versions the cache has answered or missed.
_CACHE: tuple[tuple[str, str, _Read], ...] = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model", lambda s: s.cache_hit_count),
    (
        "nv_cache_hit_duration_per_model",
        "Total cache hit duration per model, in microseconds",
        lambda s: s.cache_hit_ns // 1000,
    ),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model", lambda s: s.cache_miss_count),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
        lambda s: s.cache_miss_ns // 1000,
    ),
)
#: (name, help, bucket counts, summed ns) of the latency histograms.
_HISTOGRAMS: tuple[tuple[str, str, Callable[[SchedulerStats], list[int]], _Read], ...] = (
    (
        "nv_inference_request_histogram_ms",
        "Histogram of successful inference request durations in milliseconds",
        lambda s: s.request_buckets,
        lambda s: s.success_ns,
    ),
    (
        "nv_inference_queue_histogram_ms",
        "Histogram of the time successful requests waited in the queue, in milliseconds",
        lambda s: s.queue_buckets,
        lambda s: s.queue_ns,
    ),
    (
        "nv_inference_compute_histogram_ms",
        "Histogram of successful requests' compute durations (input, infer and output) in milliseconds",
        lambda s: s.compute_buckets,
        lambda s: s.compute_input_ns + s.compute_infer_ns + s.compute_output_ns,
    ),
)
#: (name, help, position in a sample, summed ns) of Triton's latency summaries; the help texts are
#: Triton's, word for word (its compute summaries say "Cumulative").
_SUMMARIES: tuple[tuple[str, str, int, _Read], ...] = (
    (
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
        1,
        lambda s: s.success_ns,
    ),
    (
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
        2,
        lambda s: s.queue_ns,
    ),
    (
        "nv_inference_compute_input_summary_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        3,
        lambda s: s.compute_input_ns,
    ),
    (
        "nv_inference_compute_infer_summary_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        4,
        lambda s: s.compute_infer_ns,
    ),
    (
        "nv_inference_compute_output_summary_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        5,
        lambda s: s.compute_output_ns,
    ),
)
_BOUNDS_MS = tuple(bound / 1e6 for bound in LATENCY_BUCKETS_NS)


class ModelMetrics(Collector):
    """Every loaded model version's metrics, as Triton names them (plus Naiad's own)."""

    def __init__(self, repository: ModelRepository, config: MetricsConfig) -> None:
        self._repository = repository
        self._config = config
        #: Each version's histogram lines by (family, model, version), with the figures they show.
        self._histogram_lines: dict[tuple[str, str, str], tuple[tuple[int, ...], str]] = {}

    def collect(self) -> Iterator[Metric]:
        versions = self._serving()
        yield _family(
            "nv_inference_request_success",
            "Number of successful inference requests, all batch sizes",
            "counter",
            [(labels, stats.success_count) for labels, _, stats in versions],
        )
        failures = Metric(
            "nv_inference_request_failure", "Number of failed inference requests, all batch sizes", "counter"
        )
        for labels, _, stats in versions:
            for reason in FailureReason:
                failures.add_sample(failures.name, {**labels, "reason": reason.value}, stats.failures[reason])
        yield failures
        for name, doc, read in _COUNTS:
            yield _family(name, doc, "counter", [(labels, read(stats)) for labels, _, stats in versions])
        if self._config.counter_latencies:
            for name, doc, read in _DURATIONS:
                yield _family(name, doc, "counter", [(labels, read(stats)) for labels, _, stats in versions])
        yield _family(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            "gauge",
            [(labels, stats.pending) for labels, _, stats in versions],
        )
        # the response cache's families appear once it has looked something up, as in Triton
        cached = [(labels, s) for labels, _, s in versions if s.cache_hit_count or s.cache_miss_count]
        for name, doc, read in _CACHE if cached else ():
            yield _family(name, doc, "counter", [(labels, read(stats)) for labels, stats in cached])
        if self._config.histogram_latencies:
            yield from self._histograms(versions)
        if self._config.summary_latencies:
            yield from _summaries(versions, self._config.summary_quantiles, self._cached_models())
            if self._repository.response_cache is not None:
                yield from _cache_summaries()
        yield self._states()
        yield _family(
            "nv_model_load_duration_secs",
            "Model load time in seconds",
            "gauge",
            [(labels, mv.load_ns / 1e9) for labels, mv, _ in versions],
        )
        yield _family(
            "nv_model_loaded_memory_bytes",
            "Resident memory the model version added to the server and its model processes when it loaded",
            "gauge",
            [(labels, mv.memory_bytes) for labels, mv, _ in versions],
        )
        yield _process_exits(versions)

    def _histograms(self, versions: list[tuple[_Labels, ModelVersion, SchedulerStats]]) -> Iterator[Metric]:
        """The latency histograms: ~70 lines a version, most of a scrape's work when written afresh
        (30 ms of the event loop for 65 loaded models).  A version's lines change only when it answers
        a request, and most loaded models are idle between two scrapes, so each version's text is
        kept and rewritten only when its counts or sums moved."""
        previous, kept = self._histogram_lines, {}
        for name, doc, buckets_of, summed_ns in _HISTOGRAMS:
            texts: list[str] = []
            for labels, _, stats in versions:
                buckets, summed = buckets_of(stats), summed_ns(stats)
                figures = (summed, *buckets)
                key = (name, labels["model"], labels["version"])
                known = previous.get(key)
                if known is None or known[0] != figures:
                    known = (figures, _histogram_text(name, labels, buckets, summed))
                kept[key] = known
                texts.append(known[1])
            yield Prerendered(name, doc, "histogram", "".join(texts))
        self._histogram_lines = kept

    def _cached_models(self) -> frozenset[str]:
        """Models answered from the server's response cache (Triton keeps no request summary for them)."""
        if self._repository.response_cache is None:
            return frozenset()
        return frozenset(
            name
            for name, model in self._repository.registry.models().items()
            if model.config is not None and model.config.response_cache.enable
        )

    def _serving(self) -> list[tuple[_Labels, ModelVersion, SchedulerStats]]:
        """Versions holding instances, by model name and version number."""
        rows: list[tuple[_Labels, ModelVersion, SchedulerStats]] = []
        for name, model in sorted(self._repository.registry.models().items()):
            for number, mv in sorted(model.versions.items()):
                if mv.scheduler is not None:
                    rows.append(({"model": name, "version": str(number)}, mv, mv.scheduler.stats))
        return rows

    def _states(self) -> Metric:
        """One series per version and state, 1 for the state the version is in (kube-state style)."""
        family = Metric(
            "nv_model_state",
            "Model version state as the repository index reports it (1 for the current state, else 0)",
            "gauge",
        )
        for entry in self._repository.index():
            if not entry.version:
                continue
            for state in ModelState:
                labels = {"model": entry.name, "version": entry.version, "state": state.value}
                family.add_sample(family.name, labels, int(entry.state == state.value))
        return family


def _process_exits(versions: list[tuple[_Labels, ModelVersion, SchedulerStats]]) -> Metric:
    """Naiad's: model processes that ended unexpectedly, by cause (``signal``, ``exit``,
    ``memory_limit``, ``execution_timeout``), for versions whose instances run in model processes."""
    family = Metric(
        "naiad_model_process_exits",
        "Model processes of the version that ended unexpectedly (then restarted, or given up), by cause",
        "counter",
    )
    for labels, mv, _ in versions:
        health = mv.health
        for cause, count in sorted(health.exits.items()) if health is not None else ():
            family.add_sample("naiad_model_process_exits_total", {**labels, "cause": cause}, count)
    return family


def _family(name: str, doc: str, kind: str, rows: list[tuple[_Labels, float]]) -> Metric:
    family = Metric(name, doc, kind)
    for labels, value in rows:
        family.add_sample(name, labels, value)
    return family


def _histogram_text(name: str, labels: _Labels, buckets: list[int], summed_ns: int) -> str:
    """One version's lines of the histogram family ``name``."""
    family = Metric(name, "", "histogram")
    cumulative = 0
    for bound, count in zip(_BOUNDS_MS, buckets, strict=False):
        cumulative += count
        family.add_sample(f"{name}_bucket", {**labels, "le": _bound(bound)}, cumulative)
    total = cumulative + buckets[-1]
    family.add_sample(f"{name}_bucket", {**labels, "le": "+Inf"}, total)
    family.add_sample(f"{name}_count", labels, total)
    family.add_sample(f"{name}_sum", labels, summed_ns / 1e6)
    return render_samples(family)


def _summaries(
    versions: list[tuple[_Labels, ModelVersion, SchedulerStats]],
    quantiles: tuple[tuple[float, float], ...],
    cached_models: frozenset[str],
) -> Iterator[Metric]:
    """Exact quantiles over the window's requests (NaN when it holds none), cumulative count and sum.

    As Triton: the compute summaries leave out requests answered from the cache, and a model using
    the cache has no request summary at all."""
    oldest = time.monotonic_ns() - SUMMARY_WINDOW_NS
    recent = {id(stats): [s for s in stats.samples or () if s[0] >= oldest] for _, _, stats in versions}
    for name, doc, position, summed_ns in _SUMMARIES:
        family = Metric(name, doc, "summary")
        computed = position >= _FIRST_COMPUTE
        for labels, _, stats in versions:
            if position == _REQUEST and labels["model"] in cached_models:
                continue
            values = sorted(s[position] for s in recent[id(stats)] if s[position] != NOT_COMPUTED)
            for quantile, _error in quantiles:
                value = values[max(0, math.ceil(quantile * len(values)) - 1)] / 1e3 if values else math.nan
                family.add_sample(name, {**labels, "quantile": _bound(quantile)}, value)
            count = stats.success_count - stats.cache_hit_count if computed else stats.success_count
            family.add_sample(f"{name}_count", labels, count)
            family.add_sample(f"{name}_sum", labels, summed_ns(stats) / 1e3)
        yield family


#: Positions in a :data:`~naiad.scheduling.stats.Sample`: the request duration, the first compute one.
_REQUEST, _FIRST_COMPUTE = 1, 3


def _cache_summaries() -> Iterator[Metric]:
    """Triton's per-model cache summaries: declared with ``summary_latencies`` while a cache is
    configured, and never given a series by its local cache (so here neither)."""
    for outcome in ("hit", "miss"):
        doc = f"Summary of cache {outcome} counts/durations per model, in microseconds."
        yield Metric(f"nv_cache_{outcome}_summary_per_model", doc, "summary")


def _bound(value: float) -> str:
    """A bucket bound or quantile as a label value: ``0.05``, ``1``, ``60000``."""
    return str(int(value)) if value.is_integer() else repr(value)
