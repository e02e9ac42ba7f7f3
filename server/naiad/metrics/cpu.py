"""``nv_cpu_utilization`` and ``nv_cpu_memory_*_bytes``, from ``/proc`` as Triton reads them.

Utilization is the busy share of all cores' time since the previous sample (so it averages over one
``--metrics-interval-ms``); used memory is ``MemTotal - MemAvailable``.  Without ``/proc`` (not Linux)
there are no CPU metrics, as in Triton.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_STAT = Path("/proc/stat")
_MEMINFO = Path("/proc/meminfo")


def available() -> bool:
    return _STAT.exists() and _MEMINFO.exists()


class CpuMetrics(Collector):
    """The host's CPU gauges, refreshed by :meth:`sample` (on the metrics poller's thread)."""

    def __init__(self) -> None:
        self._times = _cpu_times()
        #: (utilization, total bytes, used bytes): replaced whole, so a scrape never sees a mix.
        self._values = (0.0, *_memory())

    def sample(self) -> None:
        busy, total = _cpu_times()
        last_busy, last_total = self._times
        self._times = (busy, total)
        utilization = (busy - last_busy) / (total - last_total) if total > last_total else 0.0
        self._values = (utilization, *_memory())

    def collect(self) -> Iterator[Metric]:
        utilization, total, used = self._values
        yield GaugeMetricFamily("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", value=utilization)
        yield GaugeMetricFamily("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", value=total)
        yield GaugeMetricFamily("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", value=used)


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all cores: idle and iowait are not busy; guest time is in user."""
    fields = [int(x) for x in _STAT.read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields + [0] * (8 - len(fields))
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def _memory() -> tuple[int, int]:
    """(total, used) bytes."""
    info: dict[str, int] = {}
    for line in _MEMINFO.read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            info[key] = int(rest.split()[0]) * 1024
    total = info.get("MemTotal", 0)
    return total, total - info.get("MemAvailable", total)
