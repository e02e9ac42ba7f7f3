"""Per-model-version metrics, read from each version's scheduler counters when ``/metrics`` is scraped.

Triton's families keep Triton's names, types, help texts and labels (``model``, ``version``, and
``reason`` on failures), with Triton's counting: requests for success and failure, successes' batch elements
for ``nv_inference_count``, model executions for ``nv_inference_exec_count``.  A version is reported
while it holds instances (from READY until its unload finishes), as Triton does.  Beyond Triton:
latency histograms (``*_histogram_ms``), the model state, load duration and loaded-memory gauges.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from naiad.metrics.config import MetricsConfig
from naiad.metrics.exposition import Prerendered, escape_label, format_value
from naiad.repository.layout import model_key
from naiad.repository.manager import ModelRepository
from naiad.repository.model import ModelState, ModelVersion
from naiad.scheduling.stats import (
    FIRST_RESPONSE_FAMILY,
    LATENCY_BUCKETS_NS,
    NOT_COMPUTED,
    FailureReason,
    SchedulerStats,
)

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
_HISTOGRAMS: tuple[
    tuple[str, str, Callable[[SchedulerStats], list[int]], Callable[[SchedulerStats], int]], ...
] = (
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


@dataclass(frozen=True, slots=True)
class _Series:
    """One model version's labels, and their text written once: every per-version family prints the
    same ``model`` and ``version`` pair, with at most one more label sorted in between or around.
    Under ``--model-namespacing`` a ``namespace`` label (the model's repository) follows ``model``,
    as Triton's does."""

    labels: _Labels
    model: str  # 'model="<escaped name>"' (and ',namespace="<escaped repository>"')
    version: str  # 'version="<number>"'
    plain: str  # both, as most families print them

    @classmethod
    def of(cls, name: str, version: str, namespace: str = "") -> _Series:
        model, number = f'model="{escape_label(name)}"', f'version="{version}"'
        labels = {"model": name, "version": version}
        if namespace:
            model += f',namespace="{escape_label(namespace)}"'
            labels = {"model": name, "namespace": namespace, "version": version}
        return cls(labels, model, number, f"{model},{number}")


_Row = tuple[_Series, ModelVersion, SchedulerStats]


class ModelMetrics(Collector):
    """Every loaded model version's metrics, as Triton names them (plus Naiad's own).

    A server holding a few hundred versions has thousands of per-version series, read on the event
    loop at every scrape (the operator's every few seconds, Prometheus's), so their lines are written
    straight from each version's label text rather than through one ``Sample`` per series."""

    def __init__(self, repository: ModelRepository, config: MetricsConfig) -> None:
        self._repository = repository
        self._config = config
        #: Label texts by (model, version), kept while the version is listed.
        self._series: dict[tuple[str, str], _Series] = {}
        #: Each version's histogram lines by (family, its labels' text), with the figures they show.
        self._histogram_lines: dict[tuple[str, str], tuple[tuple[int, ...], str]] = {}

    def collect(self) -> Iterator[Metric]:
        previous, self._series = self._series, {}
        versions = self._serving(previous)
        yield _lines(
            "nv_inference_request_success",
            "Number of successful inference requests, all batch sizes",
            "counter",
            [(series.plain, stats.success_count) for series, _, stats in versions],
        )
        yield _lines(
            "nv_inference_request_failure",
            "Number of failed inference requests, all batch sizes",
            "counter",
            [
                (f'{series.model},reason="{reason.value}",{series.version}', stats.failures[reason])
                for series, _, stats in versions
                for reason in FailureReason
            ],
        )
        yield _lines(
            "nv_inference_request_error_response",
            "Number of successful inference requests whose response was an error the model gave (Naiad)",
            "counter",
            [(series.plain, stats.error_response_count) for series, _, stats in versions],
        )
        for name, doc, read in _COUNTS:
            yield _lines(name, doc, "counter", [(series.plain, read(stats)) for series, _, stats in versions])
        if self._config.counter_latencies:
            for name, doc, read in _DURATIONS:
                rows = [(series.plain, read(stats)) for series, _, stats in versions]
                yield _lines(name, doc, "counter", rows)
        yield _lines(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            "gauge",
            [(series.plain, stats.pending) for series, _, stats in versions],
        )
        # the response cache's families: for every version of a model that uses the cache, from its
        # load on, at 0 until it looks something up (as Triton 2.51 shows them, checked)
        caching = self._cached_models()
        cached = [
            (series, s)
            for series, _, s in versions
            if series.labels["model"] in caching or s.cache_hit_count or s.cache_miss_count
        ]
        for name, doc, read in _CACHE if cached else ():
            yield _lines(name, doc, "counter", [(series.plain, read(stats)) for series, stats in cached])
        if self._config.histogram_latencies:
            yield from self._histograms(versions)
        if self._config.first_response_histogram:
            yield _first_responses(versions)
        if self._config.summary_latencies:
            yield from _summaries(versions, self._config.summary_quantiles, caching)
            if self._repository.response_cache is not None:
                yield from _cache_summaries()
        yield self._states(previous)
        yield _lines(
            "nv_model_load_duration_secs",
            "Model load time in seconds",
            "gauge",
            [(series.plain, mv.load_ns / 1e9) for series, mv, _ in versions],
        )
        yield _lines(
            "nv_model_loaded_memory_bytes",
            "Resident memory the model version added to the server and its model processes when it loaded",
            "gauge",
            [(series.plain, mv.memory_bytes) for series, mv, _ in versions],
        )
        yield _process_exits(versions)

    def _histograms(self, versions: list[_Row]) -> Iterator[Metric]:
        """The latency histograms: ~70 lines a version, most of a scrape's work when written afresh
        (30 ms of the event loop for 65 loaded models).  A version's lines change only when it answers
        a request, and most loaded models are idle between two scrapes, so each version's text is
        kept and rewritten only when its counts or sums moved."""
        previous = self._histogram_lines
        kept: dict[tuple[str, str], tuple[tuple[int, ...], str]] = {}
        for name, doc, buckets_of, summed_ns in _HISTOGRAMS:
            texts: list[str] = []
            for series, _, stats in versions:
                buckets, summed = buckets_of(stats), summed_ns(stats)
                figures = (summed, *buckets)
                key = (name, series.plain)
                known = previous.get(key)
                if known is None or known[0] != figures:
                    known = (figures, _histogram_text(name, series, buckets, summed / 1e6))
                kept[key] = known
                texts.append(known[1])
            yield Prerendered(name, doc, "histogram", "".join(texts))
        self._histogram_lines = kept

    def _cached_models(self) -> frozenset[str]:
        """Models answered from the server's response cache (Triton keeps no request summary for them)."""
        if self._repository.response_cache is None:
            return frozenset()
        return frozenset(
            model.name
            for model in self._repository.registry.models().values()
            if model.config is not None and model.config.response_cache.enable
        )

    def _serving(self, previous: dict[tuple[str, str], _Series]) -> list[_Row]:
        """Versions holding instances, by model name and version number."""
        rows: list[_Row] = []
        for _, model in sorted(self._repository.registry.models().items()):
            for number, mv in sorted(model.versions.items()):
                if mv.scheduler is not None:
                    series = self._series_of(previous, model.name, str(number), model.namespace)
                    rows.append((series, mv, mv.scheduler.stats))
        return rows

    def _series_of(
        self, previous: dict[tuple[str, str], _Series], name: str, version: str, namespace: str = ""
    ) -> _Series:
        key = (model_key(name, namespace), version)
        series = self._series.get(key) or previous.get(key) or _Series.of(name, version, namespace)
        self._series[key] = series
        return series

    def _states(self, previous: dict[tuple[str, str], _Series]) -> Metric:
        """One series per version and state, 1 for the state the version is in (kube-state style)."""
        rows: list[tuple[str, float]] = []
        for entry in self._repository.index():
            if not entry.version:
                continue
            series = self._series_of(previous, entry.name, entry.version, entry.namespace)
            for state in ModelState:
                labels = f'{series.model},state="{state.value}",{series.version}'
                rows.append((labels, int(entry.state == state.value)))
        return _lines(
            "nv_model_state",
            "Model version state as the repository index reports it (1 for the current state, else 0)",
            "gauge",
            rows,
        )


def _process_exits(versions: list[_Row]) -> Metric:
    """Naiad's: model processes that ended unexpectedly, by cause (``signal``, ``exit``,
    ``memory_limit``, ``execution_timeout``), for versions whose instances run in model processes."""
    rows: list[tuple[str, float]] = []
    for series, mv, _ in versions:
        health = mv.health
        for cause, count in sorted(health.exits.items()) if health is not None else ():
            rows.append((f'cause="{escape_label(cause)}",{series.plain}', count))
    return _lines(
        "naiad_model_process_exits",
        "Model processes of the version that ended unexpectedly (then restarted, or given up), by cause",
        "counter",
        rows,
        "naiad_model_process_exits_total",
    )


def _lines(name: str, doc: str, kind: str, rows: list[tuple[str, float]], sample: str = "") -> Prerendered:
    """A family of one sample per row: (label text, value); ``sample``: the samples' name if not ``name``."""
    sample = sample or name
    text = "".join([f"{sample}{{{labels}}} {format_value(value)}\n" for labels, value in rows])
    return Prerendered(name, doc, kind, text)


def _histogram_text(
    name: str, series: _Series, buckets: list[int], summed: float, bounds: Sequence[str] = ()
) -> str:
    """One version's lines of the histogram family ``name`` (``le`` last, as Triton prints it):
    ``buckets`` per bound of ``bounds`` (default: the latency bounds, in ms), then the rest."""
    lines: list[str] = []
    plain = series.plain
    cumulative = 0
    for bound, count in zip(bounds or _BOUND_LABELS, buckets, strict=False):
        cumulative += count
        lines.append(f'{name}_bucket{{{plain},le="{bound}"}} {cumulative}\n')
    total = cumulative + buckets[-1]
    lines.append(f'{name}_bucket{{{plain},le="+Inf"}} {total}\n')
    lines.append(f"{name}_count{{{plain}}} {total}\n")
    lines.append(f"{name}_sum{{{plain}}} {format_value(summed)}\n")
    return "".join(lines)


def _first_responses(versions: list[_Row]) -> Metric:
    """Triton's ``nv_inference_first_response_histogram_ms``: each version's requests by the whole
    milliseconds to their first response, in its buckets (Triton's, or its model's ``model_metrics``)."""
    texts = [
        _histogram_text(
            FIRST_RESPONSE_FAMILY,
            series,
            stats.first_response_buckets,
            stats.first_response_ms,
            [_bound(float(bound)) for bound in stats.first_response_bounds],
        )
        for series, _, stats in versions
        if stats.first_response_buckets is not None  # (a version loaded before counting was on)
    ]
    doc = "Duration from request to first response in milliseconds"
    return Prerendered(FIRST_RESPONSE_FAMILY, doc, "histogram", "".join(texts))


def _summaries(
    versions: list[_Row],
    quantiles: tuple[tuple[float, float], ...],
    cached_models: frozenset[str],
) -> Iterator[Metric]:
    """Exact quantiles over the window's requests (NaN when it holds none), cumulative count and sum.

    As Triton: the compute summaries leave out requests answered from the cache, and a model using
    the cache has no request summary at all (nor is the family declared while no model has one)."""
    oldest = time.monotonic_ns() - SUMMARY_WINDOW_NS
    recent = {id(stats): [s for s in stats.samples or () if s[0] >= oldest] for _, _, stats in versions}
    for name, doc, position, summed_ns in _SUMMARIES:
        family = Metric(name, doc, "summary")
        computed = position >= _FIRST_COMPUTE
        for series, _, stats in versions:
            labels = series.labels
            if position == _REQUEST and labels["model"] in cached_models:
                continue
            values = sorted(s[position] for s in recent[id(stats)] if s[position] != NOT_COMPUTED)
            for quantile, _error in quantiles:
                value = values[max(0, math.ceil(quantile * len(values)) - 1)] / 1e3 if values else math.nan
                family.add_sample(name, {**labels, "quantile": _bound(quantile)}, value)
            count = stats.success_count - stats.cache_hit_count if computed else stats.success_count
            family.add_sample(f"{name}_count", labels, count)
            family.add_sample(f"{name}_sum", labels, summed_ns(stats) / 1e3)
        if family.samples or position != _REQUEST:
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


_BOUND_LABELS = tuple(_bound(bound / 1e6) for bound in LATENCY_BUCKETS_NS)
