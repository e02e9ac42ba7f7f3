"""The metrics pieces without a server: exposition text, ``--metrics-config``, CPU and GPU gauges."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
from naiad.metrics import cpu
from naiad.metrics.config import DEFAULT_QUANTILES, MetricsConfig, parse_metrics_config
from naiad.metrics.exposition import render
from naiad.metrics.gpu import GpuMetrics, visible
from naiad.scheduling.stats import LATENCY_BUCKETS_NS, SchedulerStats
from prometheus_client.metrics_core import Metric


def test_counters_keep_their_triton_names_with_sorted_labels_and_integral_values() -> None:
    success = Metric("nv_inference_request_success", "Number of successful inference requests", "counter")
    success.add_sample(success.name, {"version": "1", "model": "add_sub"}, 3)
    gauge = Metric("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", "gauge")
    gauge.add_sample(gauge.name, {}, 0.25)
    whole = Metric("nv_model_load_duration_secs", "Model load time in seconds", "gauge")
    whole.add_sample(whole.name, {"model": 'a"b\\c'}, 2.0)
    assert render([success, gauge, whole]).decode() == (
        "# HELP nv_inference_request_success Number of successful inference requests\n"
        "# TYPE nv_inference_request_success counter\n"
        'nv_inference_request_success{model="add_sub",version="1"} 3\n'
        "# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]\n"
        "# TYPE nv_cpu_utilization gauge\n"
        "nv_cpu_utilization 0.25\n"
        "# HELP nv_model_load_duration_secs Model load time in seconds\n"
        "# TYPE nv_model_load_duration_secs gauge\n"
        'nv_model_load_duration_secs{model="a\\"b\\\\c"} 2\n'
    )


def test_special_values_print_as_prometheus_reads_them() -> None:
    family = Metric("x", "x", "summary")
    for value in (math.nan, math.inf, 1e20):
        family.add_sample("x", {}, value)
    assert render([family]).decode().splitlines()[2:] == ["x NaN", "x +Inf", "x 1e+20"]


def test_metrics_config_takes_tritons_keys_and_rejects_others() -> None:
    assert parse_metrics_config([]) == MetricsConfig()
    assert MetricsConfig().summary_quantiles == DEFAULT_QUANTILES
    config = parse_metrics_config(
        ["counter_latencies=false", "summary_latencies=true", "summary_quantiles=0.5:0.05,0.99:0.001"]
    )
    assert config == MetricsConfig(
        counter_latencies=False, summary_latencies=True, summary_quantiles=((0.5, 0.05), (0.99, 0.001))
    )
    assert not parse_metrics_config(["histogram_latencies=0"]).histogram_latencies
    for bad in ("bogus=1", "counter_latencies", "summary_latencies=maybe", "summary_quantiles=2:0.1"):
        with pytest.raises(ValueError):
            parse_metrics_config([bad])
    # quantiles read as Triton reads them (std::stod), the unreadable pairs skipped with its words
    # (qa/L0_metrics passes "0.1:0.0.1,0.7:0.01,0.75:0.01")
    lenient = parse_metrics_config(["summary_quantiles=0.1:0.0.1,0.7:0.01,bad,0.8:x"])
    assert lenient.summary_quantiles == ((0.1, 0.0), (0.7, 0.01))
    assert lenient.faults == (
        "Invalid option: [bad]. No ':' delimiter found. Expected format is <quantile>:<error>",
        "Invalid option: [0.8:x]. Error: stod",
    )
    assert parse_metrics_config(["summary_quantiles=x:y"]).summary_quantiles == DEFAULT_QUANTILES


def test_stats_buckets_are_le_and_sum_to_the_observations() -> None:
    stats = SchedulerStats(lambda: 0)
    for ns in (LATENCY_BUCKETS_NS[0], LATENCY_BUCKETS_NS[0] + 1, 10**12):
        stats.observe(ns, 0, 1, 1, 1)
    assert stats.request_buckets[0] == 1 and stats.request_buckets[1] == 1 and stats.request_buckets[-1] == 1
    assert sum(stats.queue_buckets) == sum(stats.compute_buckets) == 3
    assert stats.samples is None  # kept only with summary_latencies


def test_first_responses_are_counted_in_whole_milliseconds() -> None:
    """As Triton: the duration floored to milliseconds, then ``le`` its bucket's bound."""
    stats = SchedulerStats(lambda: 0)
    stats.observe(5_000_000, 0, 1, 1, 1)
    assert stats.first_response_buckets is None  # not counted unless asked for
    stats.count_first_responses((100, 500), decoupled=False)
    for ns in (99_999_999, 100_999_999, 101_000_000, 10**10):
        stats.observe(ns, 0, 1, 1, 1)
    assert stats.first_response_buckets == [2, 1, 1]
    assert stats.first_response_ms == 99 + 100 + 101 + 10_000
    streamed = SchedulerStats(lambda: 0)
    streamed.count_first_responses((100,), decoupled=True)
    streamed.observe(10**9, 0, 1, 1, 1)  # a decoupled request's end: its first response was counted
    streamed.first_response(1_000_000)
    assert streamed.first_response_buckets == [1, 0]


@pytest.mark.skipif(not cpu.available(), reason="CPU metrics read /proc (Linux only)")
def test_cpu_gauges_read_proc() -> None:
    metrics = cpu.CpuMetrics()
    sum(i * i for i in range(200_000))
    metrics.sample()
    values = {family.name: family.samples[0].value for family in metrics.collect()}
    assert 0.0 <= values["nv_cpu_utilization"] <= 1.0
    assert 0 < values["nv_cpu_memory_used_bytes"] < values["nv_cpu_memory_total_bytes"]


class _FakeNvml:
    """The part of ``pynvml`` the GPU collector uses, for two devices (the second without power)."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.energy = [1_000_000, 5_000]
        self.shut = False

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return f"GPU-{handle}aaa".encode()

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=40 + handle)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=80 << 30, used=(handle + 1) << 30)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        if handle == 1:
            raise self.NVMLError("not supported")
        return 123_500

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        if handle == 1:
            raise self.NVMLError("not supported")
        return 700_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        return self.energy[handle]

    def nvmlShutdown(self) -> None:
        self.shut = True


def test_gpu_gauges_come_from_nvml_per_device_uuid() -> None:
    nvml = _FakeNvml()
    metrics = GpuMetrics(nvml, [0, 1])
    nvml.energy = [1_250_000, 5_000]
    metrics.sample()
    families = {family.name: family for family in metrics.collect()}
    assert families["nv_energy_consumption"].type == "counter"

    def values(name: str) -> dict[str, float]:
        return {s.labels["gpu_uuid"]: s.value for s in families[name].samples}

    assert values("nv_gpu_utilization") == {"GPU-0aaa": 0.4, "GPU-1aaa": 0.41}
    assert values("nv_gpu_memory_used_bytes") == {"GPU-0aaa": 1 << 30, "GPU-1aaa": 2 << 30}
    assert values("nv_gpu_memory_total_bytes")["GPU-1aaa"] == 80 << 30
    assert values("nv_gpu_power_usage") == {"GPU-0aaa": 123.5}  # the second device reports no power
    assert values("nv_gpu_power_limit") == {"GPU-0aaa": 700.0}
    assert values("nv_energy_consumption") == {"GPU-0aaa": 250.0, "GPU-1aaa": 0.0}
    metrics.close()
    assert nvml.shut


def test_cuda_visible_devices_selects_gpus_by_index_or_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    handles, uuids = ["h0", "h1", "h2"], ["GPU-aa", "GPU-bb", "GPU-cc"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible(handles, uuids) == handles
    assert visible(handles, uuids, "2,0") == ["h2", "h0"]
    assert visible(handles, uuids, "GPU-b,7,1") == ["h1"]  # stops at the first unknown entry
    assert visible(handles, uuids, "") == []
