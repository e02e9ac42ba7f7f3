"""A version's traffic over a window, from two scrapes of every pod's own counters, and its verdict.

The servers count requests, failures and a latency histogram per model version and never reset them
while a version stays loaded, so the difference between two scrapes is exactly what happened in
between. A pod that restarted (its counters went down) or appeared counts from zero; a pod that went
away takes its requests with it, which only makes a window smaller, never wrong. Histograms add up
across pods, so the p99 is the fleet's, not an average of pods' p99s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from naiad_operator.api.inferenceservice import CanaryAnalysis, Evidence
from naiad_operator.api.observed import PodCounters, VersionCounters

#: pod name -> its counters, at one moment.
Scrape = Mapping[str, PodCounters]


@dataclass(frozen=True, slots=True)
class Window:
    """Summed counters of one version over a window."""

    success: float = 0.0
    failure: float = 0.0
    latency_sum_ms: float = 0.0
    buckets: tuple[tuple[float, float], ...] = ()

    @property
    def requests(self) -> int:
        return round(self.success + self.failure)

    def quantile(self, q: float) -> float | None:
        """The latency below which ``q`` of the successful requests finished, interpolated linearly
        inside its bucket as Prometheus' ``histogram_quantile`` does; the highest finite bound when it
        falls in the open-ended bucket; None without successes."""
        total = self.buckets[-1][1] if self.buckets else 0.0
        if total <= 0:
            return None
        rank = q * total
        lower, below = 0.0, 0.0
        for bound, count in self.buckets:
            if count >= rank:
                if math.isinf(bound):
                    return lower
                inside = count - below
                return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
            lower, below = bound, count
        return lower

    def evidence(self) -> Evidence:
        requests = self.requests
        successes = round(self.success)
        return Evidence(
            requests=requests,
            errors=round(self.failure),
            error_rate=round(self.failure / requests, 4) if requests else None,
            p99_latency_ms=_rounded(self.quantile(0.99)),
            mean_latency_ms=_rounded(self.latency_sum_ms / successes) if successes else None,
        )


def window(before: Scrape | None, after: Scrape, model: str, version: int) -> Window:
    """``version`` of ``model`` between two scrapes, over the pods of the later one (``before`` None:
    since each pod loaded it)."""
    result = Window()
    for pod, counters in after.items():
        now = counters.get((model, version))
        if now is None:
            continue
        then = (before or {}).get(pod, {}).get((model, version))
        if then is None or now.success < then.success or now.failure < then.failure:
            then = VersionCounters()  # new here, or restarted: everything it counted is in the window
        result = _add(result, now, then)
    return result


def _add(total: Window, now: VersionCounters, then: VersionCounters) -> Window:
    earlier = dict(then.buckets)
    summed = dict(total.buckets)
    for bound, count in now.buckets:
        summed[bound] = summed.get(bound, 0.0) + count - earlier.get(bound, 0.0)
    return Window(
        total.success + now.success - then.success,
        total.failure + now.failure - then.failure,
        total.latency_sum_ms + now.latency_sum_ms - then.latency_sum_ms,
        tuple(sorted(summed.items())),
    )


def judge(evidence: Evidence, analysis: CanaryAnalysis) -> str | None:
    """Why the window fails the analysis, or None when it passes."""
    if (
        analysis.max_error_rate is not None
        and evidence.error_rate is not None
        and evidence.error_rate > analysis.max_error_rate
    ):
        return (
            f"error rate {evidence.error_rate:.2%} ({evidence.errors} of {evidence.requests} requests) "
            f"is over {analysis.max_error_rate:.2%}"
        )
    if (
        analysis.max_p99_latency_ms is not None
        and evidence.p99_latency_ms is not None
        and evidence.p99_latency_ms > analysis.max_p99_latency_ms
    ):
        return f"p99 latency {evidence.p99_latency_ms} ms is over {analysis.max_p99_latency_ms} ms"
    return None


def describe(evidence: Evidence) -> str:
    parts = [f"{evidence.requests} requests", f"{evidence.errors} errors"]
    if evidence.p99_latency_ms is not None:
        parts.append(f"p99 {evidence.p99_latency_ms} ms")
    if evidence.mean_latency_ms is not None:
        parts.append(f"mean {evidence.mean_latency_ms} ms")
    return ", ".join(parts)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
