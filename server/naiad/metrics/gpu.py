"""Triton's GPU gauges through NVML (``nvidia-ml-py``), present only where a GPU is.

Triton reads DCGM; NVML gives the same figures without a DCGM daemon.  Each series is labelled with
the device's ``gpu_uuid``; only the devices ``CUDA_VISIBLE_DEVICES`` exposes are reported (indices or
``GPU-`` UUID prefixes, as CUDA reads the variable).  Without the ``pynvml`` module, a driver or a
device, :func:`open_gpus` returns ``None`` and no GPU family appears at all.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

log = logging.getLogger("naiad.metrics")


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One device at one sample; ``None`` where the device does not report the figure."""

    uuid: str
    utilization: float | None
    memory_total: int | None
    memory_used: int | None
    power_watts: float | None
    power_limit_watts: float | None
    energy_joules: float | None


class GpuMetrics(Collector):
    """NVML devices and their latest reading; :meth:`sample` runs on the metrics poller's thread."""

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        """``nvml``: the ``pynvml`` module (initialized); ``handles``: the devices to report."""
        self._nvml = nvml
        self._handles = handles
        self._energy_start = [self._call(nvml.nvmlDeviceGetTotalEnergyConsumption, h) for h in handles]
        self._readings: list[GpuReading] = []
        self.sample()

    def sample(self) -> None:
        nvml = self._nvml
        readings = []
        for handle, energy_start in zip(self._handles, self._energy_start, strict=True):
            utilization = self._call(nvml.nvmlDeviceGetUtilizationRates, handle)
            memory = self._call(nvml.nvmlDeviceGetMemoryInfo, handle)
            power = self._call(nvml.nvmlDeviceGetPowerUsage, handle)
            limit = self._call(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
            energy = self._call(nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
            readings.append(
                GpuReading(
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    utilization=utilization.gpu / 100 if utilization is not None else None,
                    memory_total=memory.total if memory is not None else None,
                    memory_used=memory.used if memory is not None else None,
                    power_watts=power / 1000 if power is not None else None,
                    power_limit_watts=limit / 1000 if limit is not None else None,
                    energy_joules=_since(energy, energy_start),
                )
            )
        self._readings = readings

    def collect(self) -> Iterator[Metric]:
        readings = self._readings
        families = (
            ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "gauge", "utilization"),
            ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "gauge", "memory_total"),
            ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "gauge", "memory_used"),
            ("nv_gpu_power_usage", "GPU power usage in watts", "gauge", "power_watts"),
            ("nv_gpu_power_limit", "GPU power management limit in watts", "gauge", "power_limit_watts"),
            (
                "nv_energy_consumption",
                "GPU energy consumption in joules since the Triton Server started",
                "counter",
                "energy_joules",
            ),
        )
        for name, doc, kind, field in families:
            family = Metric(name, doc, kind)
            for reading in readings:
                value = getattr(reading, field)
                if value is not None:
                    family.add_sample(name, {"gpu_uuid": reading.uuid}, value)
            yield family

    def close(self) -> None:
        self._call(self._nvml.nvmlShutdown)

    def _call(self, fn: Any, *args: Any) -> Any:
        """An NVML query, or ``None`` where the device does not support it."""
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            return None


def open_gpus() -> GpuMetrics | None:
    """NVML's visible devices, or ``None`` when there is no NVML, driver or device."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        log.debug("no GPU metrics: NVML is unavailable (%s)", error)
        return None
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    handles = visible(handles, [_text(pynvml.nvmlDeviceGetUUID(h)) for h in handles])
    if not handles:
        pynvml.nvmlShutdown()
        return None
    log.info("collecting GPU metrics for %d device(s)", len(handles))
    return GpuMetrics(pynvml, handles)


def visible(handles: list[Any], uuids: list[str], env: str | None = None) -> list[Any]:
    """The devices ``CUDA_VISIBLE_DEVICES`` (or ``env``) exposes, in its order; all when unset."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES") if env is None else env
    if value is None:
        return handles
    chosen: list[Any] = []
    for entry in (e.strip() for e in value.split(",")):
        if entry.isdigit() and int(entry) < len(handles):
            index = int(entry)
        else:
            matches = [i for i, uuid in enumerate(uuids) if entry and uuid.startswith(entry)]
            if len(matches) != 1:
                break  # CUDA stops at the first entry it cannot resolve
            index = matches[0]
        if handles[index] not in chosen:
            chosen.append(handles[index])
    return chosen


def _since(energy_mj: int | None, start_mj: int | None) -> float | None:
    """Joules consumed since the server started, from NVML's millijoule totals."""
    if energy_mj is None or start_mj is None:
        return None
    return (energy_mj - start_mj) / 1000


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
