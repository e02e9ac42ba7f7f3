"""What was measured for each candidate, which of its points meet the constraints, and the ranking.

A point (one concurrency level) is *feasible* when it had no failed request, its latency (the chosen
percentile) is within ``--latency-budget-ms`` and its throughput at least ``--min-throughput``; a
candidate is feasible when it has a feasible point and its peak memory is within ``--max-memory-mb``.
Its score is taken at its best feasible point, so a candidate over the budget at every concurrency can
never win: it is ranked after every feasible one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from naiad.tools.analyze.space import Candidate
from naiad.tools.perf.engine import Measurement

OBJECTIVES = ("throughput", "latency", "memory")


@dataclass(frozen=True)
class Objectives:
    objective: str = "throughput"
    latency_budget_ms: float | None = None
    latency_metric: str = "p99"  # avg, p50, p90, p95 or p99
    min_throughput: float | None = None
    max_memory_mb: float | None = None

    def point_feasible(self, point: Measurement) -> bool:
        if point.error_count or point.request_count == 0:
            return False
        if (
            self.latency_budget_ms is not None
            and latency_ms(point, self.latency_metric) > self.latency_budget_ms
        ):
            return False
        return self.min_throughput is None or point.throughput >= self.min_throughput


def latency_ms(point: Measurement, metric: str) -> float:
    return point.latency_us(metric) / 1000


@dataclass
class CandidateResult:
    model: str
    candidate: Candidate
    config: dict[str, Any]  # what the server loaded (the model's full config with the candidate applied)
    objectives: Objectives
    #: what to write as config.pbtxt: the repository's own file with the candidate applied (None: ``config``)
    file_config: dict[str, Any] | None = None
    points: list[Measurement] = field(default_factory=list)
    memory_bytes: int = 0
    gpu_memory_bytes: int | None = None  # None: not measured (no GPU or no NVML)
    error: str = ""  # the load failed, or the server answered requests with errors

    @property
    def memory_mb(self) -> float:
        return self.memory_bytes / 2**20

    def best_point(self) -> Measurement | None:
        """The feasible point the objective prefers (None: no point meets the constraints)."""
        feasible = [p for p in self.points if self.objectives.point_feasible(p)]
        if not feasible:
            return None
        if self.objectives.objective == "latency":
            return min(feasible, key=lambda p: latency_ms(p, self.objectives.latency_metric))
        return max(feasible, key=lambda p: p.throughput)

    @property
    def feasible(self) -> bool:
        limit = self.objectives.max_memory_mb
        return self.best_point() is not None and (limit is None or self.memory_mb <= limit)

    def score(self) -> float | None:
        """Higher is better; None when infeasible."""
        best = self.best_point()
        if best is None or not self.feasible:
            return None
        if self.objectives.objective == "latency":
            return -latency_ms(best, self.objectives.latency_metric)
        if self.objectives.objective == "memory":
            return -self.memory_mb + best.throughput * 1e-9  # throughput breaks ties
        return best.throughput

    def search_rank(self) -> tuple[int, float]:
        """The quick search's comparison key (see :data:`naiad.tools.analyze.space.Rank`)."""
        score = self.score()
        if score is not None:
            return 1, score
        latencies = [latency_ms(p, self.objectives.latency_metric) for p in self.points if not p.error_count]
        return (0, -min(latencies)) if latencies and not self.error else (-1, 0.0)

    def max_throughput(self) -> float:
        return max((p.throughput for p in self.points if not p.error_count), default=0.0)

    def reason(self) -> str:
        """Why an infeasible candidate is out (empty for feasible ones)."""
        if self.error:
            return self.error
        if self.feasible:
            return ""
        if self.best_point() is not None:
            return f"memory {self.memory_mb:.0f} MiB over {self.objectives.max_memory_mb:g} MiB"
        if any(p.error_count for p in self.points):
            return "requests failed"
        if self.objectives.latency_budget_ms is not None:
            budget = self.objectives.latency_budget_ms
            return f"{self.objectives.latency_metric} over {budget:g} ms at every concurrency"
        return "below --min-throughput at every concurrency"


def rank(results: list[CandidateResult]) -> list[CandidateResult]:
    """Feasible candidates by score, then the others by their highest throughput."""
    feasible = sorted((r for r in results if r.score() is not None), key=lambda r: -(r.score() or 0.0))
    others = sorted((r for r in results if r.score() is None), key=lambda r: -r.max_throughput())
    return feasible + others
