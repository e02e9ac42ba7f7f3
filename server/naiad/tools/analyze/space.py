"""The configurations tried for a model, and the two ways of walking them.

A :class:`Candidate` is a point of the search space (instances, kind, dynamic batching and its settings)
applied to the model's own config as a load-time ``config`` override.  ``brute`` lists every point;
:class:`HillClimb` is Model Analyzer's quick search: start from one instance without dynamic batching,
measure the neighbours one step away on each axis, move to the best one while it improves the
objective, and stop at a local best (or when the time budget runs out).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Candidate:
    instances: int = 1
    kind: str = "KIND_CPU"
    dynamic_batching: bool = False
    max_batch_size: int = 0  # 0: the model's own
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()

    def label(self) -> str:
        kind = "" if self.kind == "KIND_CPU" else f" {self.kind.removeprefix('KIND_').lower()}"
        text = f"{self.instances} inst{kind}"
        if not self.dynamic_batching:
            return f"{text}, no batching"
        text += f", dyn batch max {self.max_batch_size}"
        if self.max_queue_delay_us:
            text += f", delay {self.max_queue_delay_us}us"
        if self.preferred_batch_sizes:
            text += f", preferred {list(self.preferred_batch_sizes)}"
        return text

    def apply(self, base: dict[str, Any]) -> dict[str, Any]:
        """``base`` (the model's config as JSON) with this candidate's settings; the base is not changed."""
        config = copy.deepcopy(base)
        config["instance_group"] = [{"count": self.instances, "kind": self.kind}]
        config.pop("dynamic_batching", None)
        if self.dynamic_batching:
            config["max_batch_size"] = self.max_batch_size
            batching: dict[str, Any] = {}
            if self.max_queue_delay_us:
                batching["max_queue_delay_microseconds"] = self.max_queue_delay_us
            if self.preferred_batch_sizes:
                batching["preferred_batch_size"] = list(self.preferred_batch_sizes)
            config["dynamic_batching"] = batching
        return config


@dataclass(frozen=True)
class SearchSpace:
    instances: tuple[int, ...] = (1, 2, 4)
    kinds: tuple[str, ...] = ("KIND_CPU",)
    max_batch_sizes: tuple[int, ...] = (4, 8, 16, 32)  # with dynamic batching; empty: never batch
    queue_delays_us: tuple[int, ...] = (0,)
    preferred: bool = False  # also try preferred_batch_size = [max_batch_size]
    batching: bool = True  # False for models without a batch dimension (max_batch_size 0)

    def _batching_levels(self) -> list[tuple[int, int, tuple[int, ...]]]:
        """Index 0 is "no dynamic batching"; then (max batch, delay, preferred) in growing batch size."""
        levels: list[tuple[int, int, tuple[int, ...]]] = [(0, 0, ())]
        if not self.batching:
            return levels
        for size in self.max_batch_sizes:
            for delay in self.queue_delays_us:
                levels.append((size, delay, ()))
                if self.preferred:
                    levels.append((size, delay, (size,)))
        return levels

    def candidate(self, instances: int, kind: int, level: int) -> Candidate:
        size, delay, preferred = self._batching_levels()[level]
        return Candidate(self.instances[instances], self.kinds[kind], size > 0, size, delay, preferred)

    def axes(self) -> tuple[int, int, int]:
        return len(self.instances), len(self.kinds), len(self._batching_levels())

    def brute(self) -> list[Candidate]:
        sizes = self.axes()
        return [self.candidate(*point) for point in itertools.product(*(range(n) for n in sizes))]


#: Higher is better: ``(1, objective)`` for a candidate within the constraints, ``(0, -latency)`` for one
#: outside them (so the climb still heads towards the budget), ``(-1, 0)`` for one that failed.
Rank = tuple[int, float]
Score = Callable[[Candidate], Rank]


class HillClimb:
    """Quick search: ``for candidate in HillClimb(space).walk(measure): ...``."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.scores: dict[tuple[int, int, int], Rank] = {}

    def _neighbours(self, point: tuple[int, int, int]) -> list[tuple[int, int, int]]:
        sizes = self.space.axes()
        found = []
        for axis in range(3):
            for delta in (1, -1):
                moved = list(point)
                moved[axis] += delta
                if 0 <= moved[axis] < sizes[axis]:
                    found.append((moved[0], moved[1], moved[2]))
        return found

    def walk(self, measure: Score) -> Iterator[Candidate]:
        """Yields each candidate as it is measured (``measure`` is called on it first)."""
        current = (0, 0, 0)
        self.scores[current] = measure(self.space.candidate(*current))
        yield self.space.candidate(*current)
        while True:
            best, best_score = current, self.scores[current]
            for point in self._neighbours(current):
                if point not in self.scores:
                    self.scores[point] = measure(self.space.candidate(*point))
                    yield self.space.candidate(*point)
                score = self.scores[point]
                if score > best_score:
                    best, best_score = point, score
            if best == current:
                return
            current = best
