"""Triton's pinned memory pool gauges, which Naiad reports as empty.

Triton keeps a pool of page-locked host memory for copies to and from GPUs and exposes its size and use
on every server (``nv_pinned_memory_pool_total_bytes``, ``nv_pinned_memory_pool_used_bytes``; Triton
without CUDA still reports its configured 256 MiB as the total).  Naiad allocates no such pool, so both
are 0 here: present, so that dashboards and alerts written against Triton find the families.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector


class PinnedMemoryMetrics(Collector):
    def collect(self) -> Iterator[Metric]:
        for name, doc in (
            ("nv_pinned_memory_pool_total_bytes", "Pinned memory pool total memory size, in bytes"),
            ("nv_pinned_memory_pool_used_bytes", "Pinned memory pool used memory size, in bytes"),
        ):
            family = Metric(name, doc, "gauge")
            family.add_sample(name, {}, 0)
            yield family
