"""The ``naiad_*`` families of on-demand loading and the memory budget (:mod:`naiad.repository.residency`).

Read from the residency's counters and the published models when ``/metrics`` is scraped, nothing kept:
each loaded model version's measured footprint, loads by reason (``explicit``: at start, by the load
API or POLL; ``on_demand``: by a request), evictions, whether requests for on-demand models found them
loaded (``hit``) or waited for a load (``miss``), how long they waited, and the budget against what is used.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from naiad.repository.manager import ModelRepository
from naiad.repository.residency import WAIT_BUCKETS, memory_used


class ResidencyMetrics(Collector):
    """The server's model residency, read when ``/metrics`` is scraped."""

    def __init__(self, repository: ModelRepository) -> None:
        self._repository = repository

    def collect(self) -> Iterator[Metric]:
        residency = self._repository.residency
        models = self._repository.registry.models()
        memory = Metric(
            "naiad_model_memory_bytes", "Resident memory each loaded model version measured at load", "gauge"
        )
        for _, model in sorted(models.items()):
            for number, mv in sorted(model.versions.items()):
                if mv.scheduler is not None:
                    memory.add_sample(
                        "naiad_model_memory_bytes",
                        {"model": model.name, "version": str(number)},
                        mv.memory_bytes,
                    )
        yield memory
        loads = Metric("naiad_model_loads", "Model loads completed, by what asked for them", "counter")
        for (name, reason), count in sorted(residency.loads.items()):
            loads.add_sample("naiad_model_loads_total", {"model": name, "reason": reason}, count)
        yield loads
        evictions = Metric(
            "naiad_model_evictions", "Models unloaded to stay within the model memory budget", "counter"
        )
        for name, count in sorted(residency.evictions.items()):
            evictions.add_sample("naiad_model_evictions_total", {"model": name}, count)
        yield evictions
        requests = Metric(
            "naiad_on_demand_requests",
            "Requests for on-demand models: hit = the model was loaded, miss = the request waited for a load",
            "counter",
        )
        requests.add_sample("naiad_on_demand_requests_total", {"result": "hit"}, residency.hits)
        requests.add_sample("naiad_on_demand_requests_total", {"result": "miss"}, residency.misses)
        yield requests
        waits = residency.waits
        cumulative, buckets = 0, []
        for bound, count in zip((*map(str, WAIT_BUCKETS), "+Inf"), waits.counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        wait = HistogramMetricFamily(
            "naiad_on_demand_wait_seconds", "Time requests waited for an on-demand model load"
        )
        wait.add_metric([], buckets, waits.total)
        yield wait
        budget = Metric("naiad_model_memory_budget_bytes", "The model memory budget (0: none)", "gauge")
        budget.add_sample("naiad_model_memory_budget_bytes", {}, residency.budget or 0)
        yield budget
        used = Metric(
            "naiad_model_memory_used_bytes", "Resident memory the loaded models measured at load", "gauge"
        )
        used.add_sample("naiad_model_memory_used_bytes", {}, memory_used(models))
        yield used
