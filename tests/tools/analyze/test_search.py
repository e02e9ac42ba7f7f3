"""The search space, the quick search's walk and the ranking rules (no server: measurements are given)."""

from __future__ import annotations

import numpy as np
from naiad.tools.analyze.report import line_chart, pbtxt
from naiad.tools.analyze.results import CandidateResult, Objectives, rank
from naiad.tools.analyze.space import Candidate, HillClimb, SearchSpace
from naiad.tools.perf.engine import Measurement, MeasureSettings, Window, summarize
from naiad.tools.perf.stats import ServerStats


def _point(concurrency: int, throughput: float, latency_ms: float, errors: int = 0) -> Measurement:
    """A one-second window of ``throughput`` requests, each taking ``latency_ms``."""
    count = int(throughput)
    rows = np.zeros((count + errors, 7), dtype=np.int64)
    rows[:, 1] = np.arange(count + errors)
    rows[:, 2] = int(latency_ms * 1e6)
    rows[:count, 5] = 1
    rows[:count, 6] = 1
    window = Window(rows, 1.0, {"boom": errors} if errors else {}, 0, ServerStats())
    return summarize([window], concurrency, 0.0, MeasureSettings(), True)


def _result(candidate: Candidate, objectives: Objectives, *points: Measurement, memory_mb: float = 100) -> CandidateResult:
    result = CandidateResult("m", candidate, candidate.apply({"name": "m", "max_batch_size": 8}), objectives)
    result.points = list(points)
    result.memory_bytes = int(memory_mb * 2**20)
    return result


def test_a_candidate_over_the_budget_never_wins() -> None:
    budget = Objectives(latency_budget_ms=10)
    fast_but_slow = _result(Candidate(4), budget, _point(1, 900, 12), _point(8, 5000, 40))
    modest = _result(Candidate(1), budget, _point(1, 300, 3), _point(8, 800, 9), _point(16, 900, 20))
    ranked = rank([fast_but_slow, modest])
    assert ranked == [modest, fast_but_slow]
    assert modest.best_point() is not None and modest.best_point().concurrency == 8  # its last point is over
    assert fast_but_slow.score() is None and fast_but_slow.reason() == "p99 over 10 ms at every concurrency"
    # without a budget the faster one wins
    free = Objectives()
    assert rank([_result(Candidate(1), free, _point(8, 800, 9)), _result(Candidate(4), free, _point(8, 5000, 40))])[
        0
    ].candidate == Candidate(4)


def test_failed_requests_and_memory_limits_disqualify() -> None:
    objectives = Objectives(max_memory_mb=500)
    failing = _result(Candidate(2), objectives, _point(8, 9000, 1, errors=3))
    heavy = _result(Candidate(4), objectives, _point(8, 5000, 1), memory_mb=800)
    light = _result(Candidate(1), objectives, _point(8, 100, 1), memory_mb=200)
    assert rank([failing, heavy, light])[0] is light
    assert heavy.reason() == "memory 800 MiB over 500 MiB"
    assert failing.reason() == "requests failed"


def test_latency_and_memory_objectives() -> None:
    latency = Objectives(objective="latency")
    quick = _result(Candidate(1), latency, _point(1, 100, 2))
    busy = _result(Candidate(2), latency, _point(1, 900, 5))
    assert rank([busy, quick])[0] is quick
    memory = Objectives(objective="memory")
    small = _result(Candidate(1), memory, _point(1, 100, 2), memory_mb=150)
    big = _result(Candidate(2), memory, _point(1, 900, 2), memory_mb=300)
    assert rank([big, small])[0] is small


def test_hill_climb_stops_at_the_best_neighbourhood_and_measures_less_than_brute() -> None:
    space = SearchSpace(instances=(1, 2, 3, 4), max_batch_sizes=(2, 4, 8, 16))
    # throughput peaks at 2 instances with max batch 8 (level 3)
    peak = {(2, 8): 1000.0}

    def score(candidate: Candidate) -> tuple[int, float]:
        if (candidate.instances, candidate.max_batch_size) in peak:
            return 1, peak[(candidate.instances, candidate.max_batch_size)]
        level = 0 if not candidate.dynamic_batching else [2, 4, 8, 16].index(candidate.max_batch_size) + 1
        if level == 0:  # unbatched: over the latency budget, nearer to it with more instances
            return 0, -100.0 / candidate.instances
        return 1, 500 - 40 * abs(candidate.instances - 2) - 30 * abs(level - 3)

    walked = list(HillClimb(space).walk(score))
    assert walked[0] == Candidate(1)  # starts from one unbatched instance
    assert Candidate(2, dynamic_batching=True, max_batch_size=8) in walked
    assert len(walked) < len(space.brute()) == 4 * 5


def test_candidate_applies_to_the_model_config() -> None:
    base = {"name": "m", "max_batch_size": 4, "dynamic_batching": {"max_queue_delay_microseconds": 5}}
    batched = Candidate(2, "KIND_CPU", True, 16, 100, (16,)).apply(base)
    assert batched["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]
    assert batched["max_batch_size"] == 16
    assert batched["dynamic_batching"] == {"max_queue_delay_microseconds": 100, "preferred_batch_size": [16]}
    plain = Candidate(1).apply(base)
    assert "dynamic_batching" not in plain and plain["max_batch_size"] == 4
    assert base["max_batch_size"] == 4 and "instance_group" not in base  # the base is not changed
    assert 'max_batch_size: 16' in pbtxt(batched) and "preferred_batch_size: 16" in pbtxt(batched)


def test_chart_is_plain_svg_with_a_budget_marker() -> None:
    svg = line_chart("t", "x", "y", [("a <b>", "#000", [(1.0, 10.0), (2.0, 30.0)])], x_marker=(1.5, "budget"))
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "a &lt;b&gt;" in svg and 'class="budget"' in svg and svg.count("<circle") == 2
