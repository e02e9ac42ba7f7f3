"""Everything ``/metrics`` serves, assembled from the server settings.

Per-model metrics are always there while metrics are on; CPU metrics with ``--allow-cpu-metrics`` on
Linux; GPU metrics with ``--allow-gpu-metrics`` where NVML finds a device.  The poller that refreshes
CPU and GPU gauges runs only when one of them is collected.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from naiad.metrics import cpu
from naiad.metrics.cache import CacheMetrics
from naiad.metrics.config import parse_metrics_config
from naiad.metrics.custom import CustomMetricsCollector
from naiad.metrics.exposition import Exposition
from naiad.metrics.forwarding import ForwardingMetrics
from naiad.metrics.gpu import GpuMetrics, open_gpus
from naiad.metrics.models import SUMMARY_SAMPLES, ModelMetrics
from naiad.metrics.pinned import PinnedMemoryMetrics
from naiad.metrics.poller import Poller
from naiad.metrics.residency import ResidencyMetrics
from naiad.repository.manager import ModelRepository
from naiad.repository.peers import Peers
from naiad.scheduling.cache import LocalCache
from naiad.scheduling.stats import SchedulerStats
from naiad.settings import ServerSettings

log = logging.getLogger("naiad.metrics")


class ServerMetrics:
    """The server's collectors; ``start()`` before models load, ``stop()`` at exit."""

    def __init__(
        self, repository: ModelRepository, settings: ServerSettings, peers: Peers | None = None
    ) -> None:
        config = parse_metrics_config(settings.metrics_config)
        for fault in config.faults:
            log.error("%s", fault)
        if config.summary_latencies:
            SchedulerStats.samples_kept = SUMMARY_SAMPLES
        SchedulerStats.first_responses = config.first_response_histogram
        self._collectors: list[Collector] = [ModelMetrics(repository, config)]
        if isinstance(repository.response_cache, LocalCache):  # (Triton's Redis cache reports none)
            self._collectors.append(CacheMetrics(repository.response_cache))
        self._collectors.append(PinnedMemoryMetrics())
        self._collectors.append(ResidencyMetrics(repository))
        if peers is not None and peers.enabled:
            self._collectors.append(ForwardingMetrics(peers))
        self._custom = CustomMetricsCollector(repository.runtime)
        self._collectors.append(self._custom)
        self._gpus: GpuMetrics | None = None
        sources: list[cpu.CpuMetrics | GpuMetrics] = []
        if settings.allow_cpu_metrics and cpu.available():
            sources.append(cpu.CpuMetrics())
        if settings.allow_gpu_metrics:
            self._gpus = open_gpus()
            if self._gpus is not None:
                sources.append(self._gpus)
        self._collectors += sources
        self._poller = Poller(sources, settings.metrics_interval_ms)
        self._exposition = Exposition()

    def start(self) -> None:
        self._poller.start()

    def stop(self) -> None:
        self._poller.stop()
        if self._gpus is not None:
            self._gpus.close()

    def collect(self) -> Iterator[Metric]:
        for collector in self._collectors:
            yield from collector.collect()

    async def exposition(self) -> bytes:
        """The ``/metrics`` document, once what model processes changed has come."""
        await self._custom.refresh()
        return self._exposition.render(self.collect())
