"""The search for one model: load each candidate by override, sweep concurrency, score, move on.

One ``naiad serve`` (explicit model control) and, per model, one :class:`~naiad.tools.perf.session.Session`
(its load-generating processes outlive the candidates: requests do not change with the config).  Between
candidates the load stops, the model is loaded again with the candidate's ``config`` override (the
repository's files are never written), and the sweep starts over.  Every step checks the time budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from naiad.tools.analyze.results import CandidateResult, Objectives, latency_ms
from naiad.tools.analyze.server import PeakMemory, ServerUnderTest
from naiad.tools.analyze.space import Candidate, HillClimb, SearchSpace
from naiad.tools.perf.control import ControlError, connect
from naiad.tools.perf.engine import Measurement, MeasureSettings
from naiad.tools.perf.session import LoadOptions, Session, Target

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SweepOptions:
    concurrencies: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    protocol: str = "http"
    workers: int | None = None
    plateau_gain: float = 0.05  # stop a sweep after two steps that each gain less than this


class OutOfTime(Exception):
    """The time budget ran out; what was measured so far stands."""


def repository_config(repositories: Sequence[Path], model: str) -> dict[str, Any] | None:
    """The model's own ``config.pbtxt`` as JSON (None when it has none, or it does not parse)."""
    for repository in repositories:
        path = repository / model / "config.pbtxt"
        if path.is_file():
            try:
                message = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
            except text_format.ParseError:
                return None
            config: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
            return config
    return None


class Analyzer:
    def __init__(
        self,
        server: ServerUnderTest,
        space: SearchSpace,
        objectives: Objectives,
        sweep: SweepOptions,
        settings: MeasureSettings,
        deadline: float,
        mode: str,
        progress: Progress,
    ) -> None:
        self.server, self.space, self.objectives = server, space, objectives
        self.sweep, self.settings, self.deadline, self.mode = sweep, settings, deadline, mode
        self.progress = progress
        url = server.grpc_url if sweep.protocol == "grpc" else server.http_url
        self.url = url
        self.control = connect(sweep.protocol, url)

    def _check_time(self) -> None:
        if time.monotonic() >= self.deadline:
            raise OutOfTime

    def model(self, name: str) -> list[CandidateResult]:
        """Every candidate measured for ``name``, in the order measured."""
        self.control.load(name)
        base: dict[str, Any] = self.control.config(name, "")
        original = repository_config(self.server.repositories, name)
        space = self.space
        if int(base.get("max_batch_size", 0) or 0) == 0:
            space = SearchSpace(
                space.instances, space.kinds, (), space.queue_delays_us, False, batching=False
            )
        results: list[CandidateResult] = []
        options = LoadOptions(workers=self.sweep.workers)
        target = Target(self.url, self.sweep.protocol, name)
        with Session(target, options, self.settings, max(self.sweep.concurrencies)) as session:

            def measure(candidate: Candidate) -> tuple[int, float]:
                self._check_time()
                result = self._candidate(session, name, base, candidate)
                if original is not None:
                    result.file_config = candidate.apply(original)
                results.append(result)
                return result.search_rank()

            try:
                if self.mode == "brute":
                    for candidate in space.brute():
                        measure(candidate)
                else:
                    for _ in HillClimb(space).walk(measure):
                        pass
            except OutOfTime:
                self.progress(f"{name}: time budget spent after {len(results)} candidates")
            finally:
                if session.generator is not None:
                    session.generator.concurrency(0)
        try:
            self.control.unload(name)
        except ControlError:
            pass
        return results

    def _candidate(
        self, session: Session, name: str, base: dict[str, Any], candidate: Candidate
    ) -> CandidateResult:
        assert session.generator is not None
        config = candidate.apply(base)
        result = CandidateResult(name, candidate, config, self.objectives)
        session.generator.concurrency(0)
        time.sleep(0.05)
        session.generator.collect()
        self.progress(f"{name}: loading {candidate.label()}")
        try:
            self.control.load(name, config)
        except ControlError as error:
            result.error = f"load failed: {error}"
            return result
        with PeakMemory(self.server) as memory:
            try:
                self._sweep(session, name, candidate, result.points)
            except OutOfTime:
                result.memory_bytes, result.gpu_memory_bytes = memory.peak, memory.gpu_peak
                raise
            finally:
                session.generator.concurrency(0)
        result.memory_bytes, result.gpu_memory_bytes = memory.peak, memory.gpu_peak
        if any(p.error_count for p in result.points):
            first = next(iter(next(p for p in result.points if p.error_count).errors), "")
            result.error = f"requests failed: {first}"
        return result

    def _sweep(self, session: Session, name: str, candidate: Candidate, points: list[Measurement]) -> None:
        slow_steps = 0
        for concurrency in self.sweep.concurrencies:
            self._check_time()
            self.progress(f"{name}: {candidate.label()}, concurrency {concurrency}")
            point = session.profiler.concurrency(concurrency)
            best = max((p.throughput for p in points), default=0.0)
            points.append(point)
            if point.error_count:
                return
            # more requests in flight only wait longer; but one tail over the budget may be noise: stop after
            # two points over it, or one whose median is over it
            twice = len(points) > 1 and self._over(points[-2])
            if self._over(point) and (twice or self._over(point, "p50")):
                return
            slow_steps = slow_steps + 1 if point.throughput < best * (1 + self.sweep.plateau_gain) else 0
            if slow_steps >= 2:
                return

    def _over(self, point: Measurement, metric: str | None = None) -> bool:
        budget = self.objectives.latency_budget_ms
        return budget is not None and latency_ms(point, metric or self.objectives.latency_metric) > budget

    def close(self) -> None:
        self.control.close()
