"""Python models' custom metrics (``pb_utils.MetricFamily``) on ``/metrics``, printed as Triton does:
the family's name, description and kind; a histogram's count, sum, then cumulative buckets with
``le`` after the model's labels."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from naiad.backends.python.custom_metrics import CustomMetrics, MetricKind, bound
from naiad.backends.runtime import Runtime

_TYPES = {MetricKind.COUNTER: "counter", MetricKind.GAUGE: "gauge", MetricKind.HISTOGRAM: "histogram"}


class CustomMetricsCollector(Collector):
    """Reads the Python backend's custom metrics at each scrape (none until a Python model loads)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def collect(self) -> Iterator[Metric]:
        custom = getattr(self._runtime.loaded_backend("python"), "custom_metrics", None)
        if not isinstance(custom, CustomMetrics):
            return
        for name, description, kind, series in custom.families():
            family = Metric(name, description, _TYPES[MetricKind(kind)])
            for one in series:
                labels = dict(one.labels)
                if one.buckets is None:
                    family.add_sample(name, labels, one.value)
                    continue
                family.add_sample(f"{name}_count", labels, one.observed)
                family.add_sample(f"{name}_sum", labels, one.total)
                for upper, count in zip(one.buckets, one.counts, strict=True):
                    family.add_sample(f"{name}_bucket", {**labels, "le": bound(upper)}, count)
                family.add_sample(f"{name}_bucket", {**labels, "le": "+Inf"}, one.observed)
            yield family
