"""The local response cache's gauges (``--cache-config local,size=N``), as Triton's local cache names them.

Triton reports the whole cache, without labels, as gauges (they are refreshed by its metrics thread):
``nv_cache_num_entries``, ``nv_cache_num_lookups``, ``nv_cache_num_hits``, ``nv_cache_num_misses``,
``nv_cache_num_evictions``, ``nv_cache_util`` (0 to 1), and the summed ``nv_cache_lookup_duration`` and
``nv_cache_insertion_duration`` in microseconds.  The per-model ``nv_cache_*_per_model`` counters live
with the other per-version families (:mod:`naiad.metrics.models`).  Read when scraped, nothing kept.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from naiad.scheduling.cache import LocalCache


class CacheMetrics(Collector):
    """The server's response cache, read when ``/metrics`` is scraped."""

    def __init__(self, cache: LocalCache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        cache = self._cache
        util = cache.used / cache.capacity if cache.capacity else 0.0
        for name, doc, value in (
            ("nv_cache_util", "Cache utilization [0.0 - 1.0]", util),
            ("nv_cache_num_entries", "Number of responses stored in response cache", len(cache)),
            ("nv_cache_num_hits", "Number of cache hits in response cache", cache.hits),
            ("nv_cache_num_misses", "Number of cache misses in response cache", cache.misses),
            ("nv_cache_num_lookups", "Number of cache lookups in response cache", cache.hits + cache.misses),
            ("nv_cache_num_evictions", "Number of cache evictions in response cache", cache.evictions),
            (
                "nv_cache_lookup_duration",
                "Total cache lookup duration (hit and miss), in microseconds",
                cache.lookup_ns // 1000,
            ),
            (
                "nv_cache_insertion_duration",
                "Total cache insertion duration, in microseconds",
                cache.insertion_ns // 1000,
            ),
        ):
            family = Metric(name, doc, "gauge")
            family.add_sample(name, {}, value)
            yield family
