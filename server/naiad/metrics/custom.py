"""Python models' custom metrics (``pb_utils.MetricFamily``) on ``/metrics``, printed as Triton does:
the family's name, description and kind; a histogram's count, sum, then cumulative buckets with
``le`` after the model's labels."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from naiad.backends.python.custom_metrics import CustomMetrics, MetricKind, bound
from naiad.backends.runtime import Runtime

_TYPES = {MetricKind.COUNTER: "counter", MetricKind.GAUGE: "gauge", MetricKind.HISTOGRAM: "histogram"}
#: How long a scrape waits for model processes to send what changed (one stuck in C code holding the
#: GIL does not answer: its last snapshot is shown).
ASK_TIMEOUT_S = 1.0


class CustomMetricsCollector(Collector):
    """Reads the Python backend's custom metrics at each scrape (none until a Python model loads)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def refresh(self) -> None:
        """Before a scrape: have model processes send what changed, so the scrape shows it."""
        custom = self._custom()
        asked = custom.ask_changes() if custom is not None else []
        if asked:
            await asyncio.wait([asyncio.wrap_future(answer) for answer in asked], timeout=ASK_TIMEOUT_S)

    def _custom(self) -> CustomMetrics | None:
        custom = getattr(self._runtime.loaded_backend("python"), "custom_metrics", None)
        return custom if isinstance(custom, CustomMetrics) else None

    def collect(self) -> Iterator[Metric]:
        custom = self._custom()
        if custom is None:
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
