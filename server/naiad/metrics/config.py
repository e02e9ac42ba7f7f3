"""``--metrics-config``: which families of latency metrics ``/metrics`` publishes.

Triton's settings and defaults, plus per-model latency histograms, which Triton lacks and which are
on by default here: counters cannot give a p99, summaries cannot be aggregated across pods, and
histograms can.  Settings are ``key=value``; an unknown key or a malformed value is a usage error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

#: Triton's default summary quantiles, as (quantile, allowed error) pairs.
DEFAULT_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.5, 0.05),
    (0.9, 0.01),
    (0.95, 0.001),
    (0.99, 0.001),
    (0.999, 0.001),
)
_TRUE = {"true", "1", "on", "yes"}
_FALSE = {"false", "0", "off", "no"}


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """What ``--metrics-config`` chose (Triton's keys and defaults, except ``histogram_latencies``).

    ``counter_latencies``: the ``nv_inference_*_duration_us`` counters; ``histogram_latencies``:
    the ``nv_inference_{request,queue,compute}_histogram_ms`` histograms (Naiad; Triton's key of the
    same name turns on a first-response histogram, off by default there); ``summary_latencies``: the
    ``nv_inference_*_summary_us`` summaries over a sliding window, with ``summary_quantiles``.
    """

    counter_latencies: bool = True
    histogram_latencies: bool = True
    summary_latencies: bool = False
    summary_quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES


def parse_metrics_config(items: Sequence[str]) -> MetricsConfig:
    """Fold ``--metrics-config`` items (``key=value``, later ones win); ``ValueError`` names the fault."""
    config = MetricsConfig()
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"--metrics-config expects <setting>=<value>, got '{item}'")
        if key == "counter_latencies":
            config = replace(config, counter_latencies=_flag(key, value))
        elif key == "histogram_latencies":
            config = replace(config, histogram_latencies=_flag(key, value))
        elif key == "summary_latencies":
            config = replace(config, summary_latencies=_flag(key, value))
        elif key == "summary_quantiles":
            config = replace(config, summary_quantiles=_quantiles(value))
        else:
            raise ValueError(f"unknown --metrics-config setting '{key}'")
    return config


def _flag(key: str, value: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"--metrics-config {key} expects true or false, got '{value}'")


def _quantiles(value: str) -> tuple[tuple[float, float], ...]:
    """``0.5:0.05,0.9:0.01``: each quantile and its allowed error, both in [0, 1]."""
    pairs: list[tuple[float, float]] = []
    for part in value.split(","):
        quantile, sep, error = part.partition(":")
        fault = f"--metrics-config summary_quantiles: '{part}' is not <quantile>:<error>, both in [0, 1]"
        try:
            pair = (float(quantile), float(error))
        except ValueError:
            raise ValueError(fault) from None
        if not sep or not all(0.0 <= x <= 1.0 for x in pair):
            raise ValueError(fault)
        pairs.append(pair)
    return tuple(pairs)
