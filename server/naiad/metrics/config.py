"""``--metrics-config``: which families of latency metrics ``/metrics`` publishes.

Triton's settings and defaults, plus per-model latency histograms, which Triton lacks and which are
on by default here: counters cannot give a p99, summaries cannot be aggregated across pods, and
histograms can.  Settings are ``key=value``; an unknown key or a malformed value is a usage error.
"""

from __future__ import annotations

import re
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
    the ``nv_inference_{request,queue,compute}_histogram_ms`` histograms (Naiad, on by default), and
    when given as true Triton's ``nv_inference_first_response_histogram_ms`` too (Triton's key of the
    same name, whose one histogram is off by default there); ``summary_latencies``: the
    ``nv_inference_*_summary_us`` summaries over a sliding window, with ``summary_quantiles``.
    """

    counter_latencies: bool = True
    histogram_latencies: bool = True
    summary_latencies: bool = False
    summary_quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES
    #: Triton's ``nv_inference_first_response_histogram_ms``: only when ``histogram_latencies=true``
    #: is given, as in Triton, where that is its one histogram and off by default.
    first_response_histogram: bool = False
    #: ``summary_quantiles`` pairs that were skipped, in Triton's words (logged as errors at start).
    faults: tuple[str, ...] = ()


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
            enabled = _flag(key, value)
            config = replace(config, histogram_latencies=enabled, first_response_histogram=enabled)
        elif key == "summary_latencies":
            config = replace(config, summary_latencies=_flag(key, value))
        elif key == "summary_quantiles":
            quantiles, faults = _quantiles(value)
            # as Triton: the pairs it could read, or the defaults when it could read none
            config = replace(config, summary_quantiles=quantiles or config.summary_quantiles, faults=faults)
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


def _quantiles(value: str) -> tuple[tuple[tuple[float, float], ...], tuple[str, ...]]:
    """``0.5:0.05,0.9:0.01``: each quantile and its allowed error, both in [0, 1], read as Triton reads
    them (each number from the start of its text, as ``std::stod``: ``0.0.1`` is 0.0); a pair without
    ``:`` or a number is skipped with Triton's error line (returned, for the log).  Out of [0, 1] is
    a usage error."""
    pairs: list[tuple[float, float]] = []
    faults: list[str] = []
    for part in value.split(","):
        quantile, sep, error = part.partition(":")
        if not sep:
            missing = "No ':' delimiter found. Expected format is <quantile>:<error>"
            faults.append(f"Invalid option: [{part}]. {missing}")
            continue
        read_quantile, read_error = _leading_number(quantile), _leading_number(error)
        if read_quantile is None or read_error is None:
            faults.append(f"Invalid option: [{part}]. Error: stod")
            continue
        if not (0.0 <= read_quantile <= 1.0 and 0.0 <= read_error <= 1.0):
            raise ValueError(f"--metrics-config summary_quantiles: '{part}': both numbers must be in [0, 1]")
        pairs.append((read_quantile, read_error))
    return tuple(pairs), tuple(faults)


def _leading_number(text: str) -> float | None:
    """The number ``text`` starts with (after spaces), as C's ``strtod`` reads it; None if none."""
    match = _NUMBER.match(text)
    return float(match.group()) if match else None


_NUMBER = re.compile(r"\s*[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
