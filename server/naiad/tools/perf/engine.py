"""The measurement engine shared by ``naiad perf`` and ``naiad analyze``.

:class:`LoadGenerator` owns the worker processes; :class:`Profiler` applies one load level (a concurrency
or a request rate), measures back-to-back windows of ``--measurement-interval`` until the last three agree
within ``--stability-percentage`` on throughput and on the stabilizing latency (average, or the
``--percentile``), at most ``--max-trials`` windows, and merges those three into one
:class:`Measurement` (perf_analyzer's rule).  A window counts the requests that *finished* inside it.
"""

from __future__ import annotations

import math
import multiprocessing
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import TracebackType

import numpy as np

from naiad.tools.perf.control import Control, ControlError
from naiad.tools.perf.stats import ServerStats
from naiad.tools.perf.worker import WorkerPlan, worker_main

PERCENTILES = (50, 90, 95, 99)
_START, _END, _LATENCY, _SEND, _RECEIVE, _OK, _RESPONSES = range(7)


class LoadGenerator:
    """Worker processes (spawned: grpcio and forking do not mix) that keep the load on the server."""

    def __init__(self, plans: list[WorkerPlan], start_timeout: float = 60.0) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        self.processes: list[multiprocessing.process.BaseProcess] = []
        try:
            for plan in plans:
                ours, theirs = context.Pipe()
                process = context.Process(target=worker_main, args=(plan, theirs), daemon=True)
                process.start()
                theirs.close()
                self.pipes.append(ours)
                self.processes.append(process)
            for pipe in self.pipes:
                if not pipe.poll(start_timeout):
                    raise RuntimeError("a load-generator process did not start")
                pipe.recv()
        except BaseException:
            self.close()
            raise

    @property
    def workers(self) -> int:
        return len(self.pipes)

    def concurrency(self, count: int) -> None:
        for index, pipe in enumerate(self.pipes):
            pipe.send(("concurrency", count // self.workers + (index < count % self.workers)))

    def rate(self, per_second: float) -> None:
        for pipe in self.pipes:
            pipe.send(("rate", per_second / self.workers))

    def collect(self) -> tuple[np.ndarray, dict[str, int], int, float]:
        """Every request finished since the last collect, errors, sequences started and CPU seconds spent."""
        for pipe in self.pipes:
            pipe.send(("collect",))
        arrays: list[np.ndarray] = []
        errors: dict[str, int] = {}
        sequences, cpu = 0, 0.0
        for pipe in self.pipes:
            records, worker_errors, spent, started = pipe.recv()
            arrays.append(records)
            sequences += started
            cpu += spent
            for message, count in worker_errors.items():
                errors[message] = errors.get(message, 0) + count
        return np.concatenate(arrays), errors, sequences, cpu

    def close(self) -> None:
        for pipe in self.pipes:
            try:
                pipe.send(("stop",))
            except OSError:
                pass
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()
        for pipe in self.pipes:
            pipe.close()
        self.pipes, self.processes = [], []

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


@dataclass(frozen=True)
class MeasureSettings:
    interval_ms: int = 5000
    stability_percentage: float = 10.0
    max_trials: int = 10
    percentile: int | None = None  # None: stabilize on (and report) the average latency
    batch: int = 1
    warmup_ms: int | None = None  # default: a fifth of a window, at most a second


@dataclass
class Window:
    records: np.ndarray
    seconds: float
    errors: dict[str, int]
    sequences: int
    server: ServerStats
    cpu_seconds: float = 0.0  # the load generator's, all processes

    def ok(self) -> np.ndarray:
        rows: np.ndarray = self.records[self.records[:, _OK] == 1]
        return rows


@dataclass
class Measurement:
    """One load level, summarised over its last stable windows (perf_analyzer's ``PerfStatus``)."""

    concurrency: int
    request_rate: float
    batch: int
    seconds: float
    request_count: int
    error_count: int
    errors: dict[str, int]
    throughput: float  # inferences (requests x batch) per second
    response_throughput: float
    sequence_count: int
    avg_latency_us: float
    std_latency_us: float
    percentiles_us: dict[int, float]
    avg_send_us: float
    avg_receive_us: float
    server: ServerStats
    stable: bool
    percentile: int | None
    client_cpu_seconds: float = 0.0

    @property
    def client_overhead_pct(self) -> float:
        """The load generator's CPU time as a share of one core over the measurement."""
        return 100 * self.client_cpu_seconds / self.seconds if self.seconds else 0.0

    @property
    def client_cpu_us_per_request(self) -> float:
        count = self.request_count + self.error_count
        return 1e6 * self.client_cpu_seconds / count if count else 0.0

    @property
    def stabilizing_latency_us(self) -> float:
        return self.avg_latency_us if self.percentile is None else self.percentiles_us[self.percentile]

    def latency_us(self, which: str) -> float:
        """``avg`` or ``p50``/``p90``/``p95``/``p99``."""
        return self.avg_latency_us if which == "avg" else self.percentiles_us[int(which.lstrip("p"))]


def _percentile(sorted_values: np.ndarray, p: int) -> float:
    if len(sorted_values) == 0:
        return 0.0
    index = max(0, math.ceil(p / 100 * len(sorted_values)) - 1)
    return float(sorted_values[index]) / 1000


def summarize(
    windows: list[Window], concurrency: int, rate: float, settings: MeasureSettings, stable: bool
) -> Measurement:
    records = np.concatenate([w.records for w in windows])
    ok = records[records[:, _OK] == 1]
    seconds = sum(w.seconds for w in windows)
    server = ServerStats()
    errors: dict[str, int] = {}
    for window in windows:
        server = server + window.server
        for message, count in window.errors.items():
            errors[message] = errors.get(message, 0) + count
    latencies = np.sort(ok[:, _LATENCY]) if len(ok) else np.zeros(0, dtype=np.int64)
    count = len(ok)
    return Measurement(
        concurrency=concurrency,
        request_rate=rate,
        batch=settings.batch,
        seconds=seconds,
        request_count=count,
        error_count=len(records) - count,
        errors=errors,
        throughput=count * settings.batch / seconds if seconds else 0.0,
        response_throughput=float(ok[:, _RESPONSES].sum()) / seconds if seconds else 0.0,
        sequence_count=sum(w.sequences for w in windows),
        avg_latency_us=float(latencies.mean()) / 1000 if count else 0.0,
        std_latency_us=float(latencies.std()) / 1000 if count else 0.0,
        percentiles_us={p: _percentile(latencies, p) for p in PERCENTILES},
        avg_send_us=float(ok[:, _SEND].mean()) / 1000 if count else 0.0,
        avg_receive_us=float(ok[:, _RECEIVE].mean()) / 1000 if count else 0.0,
        server=server,
        stable=stable,
        percentile=settings.percentile,
        client_cpu_seconds=sum(w.cpu_seconds for w in windows),
    )


class Profiler:
    """Measures load levels against one model through a :class:`LoadGenerator`."""

    def __init__(
        self,
        generator: LoadGenerator,
        control: Control,
        model: str,
        version: str,
        settings: MeasureSettings,
        on_window: Callable[[int, float, float], None] | None = None,
    ) -> None:
        self.generator = generator
        self.control = control
        self.model, self.version = model, version
        self.settings = settings
        self.on_window = on_window
        self.server_stats = True

    def _stats(self) -> ServerStats:
        if not self.server_stats:
            return ServerStats()
        try:
            return ServerStats.parse(
                self.control.statistics(self.model, self.version), self.model, self.version
            )
        except ControlError:
            self.server_stats = False  # a server without the statistics extension: client side only
            return ServerStats()

    def concurrency(self, count: int) -> Measurement:
        self.generator.concurrency(count)
        return self._measure(count, 0.0)

    def rate(self, per_second: float) -> Measurement:
        self.generator.rate(per_second)
        return self._measure(0, per_second)

    def _windows(self) -> Iterator[Window]:
        settings = self.settings
        warmup = settings.warmup_ms if settings.warmup_ms is not None else min(settings.interval_ms / 5, 1000)
        time.sleep(warmup / 1000)
        self.generator.collect()
        start = time.monotonic_ns()
        before = self._stats()
        carry = np.zeros((0, 7), dtype=np.int64)
        while True:
            time.sleep(max(0.0, (start + settings.interval_ms * 1_000_000 - time.monotonic_ns()) / 1e9))
            end = time.monotonic_ns()
            records, errors, sequences, cpu = self.generator.collect()
            after = self._stats()
            records = np.concatenate([carry, records])
            inside = records[:, _END] < end
            carry = records[~inside]
            yield Window(records[inside], (end - start) / 1e9, errors, sequences, after - before, cpu)
            start, before = end, after

    def _measure(self, concurrency: int, rate: float) -> Measurement:
        settings = self.settings
        windows: list[Window] = []
        for window in self._windows():
            windows.append(window)
            ok = window.ok()
            ips = len(ok) * settings.batch / window.seconds
            if self.on_window is not None:
                latency = float(ok[:, _LATENCY].mean()) / 1000 if len(ok) else 0.0
                self.on_window(len(windows), ips, latency)
            if len(windows) >= 3 and self._stable(windows[-3:]):
                return summarize(windows[-3:], concurrency, rate, settings, True)
            if len(windows) >= settings.max_trials:
                return summarize(windows[-3:], concurrency, rate, settings, False)
        raise AssertionError("unreachable")

    def _stable(self, windows: list[Window]) -> bool:
        threshold = self.settings.stability_percentage / 100
        throughputs, latencies = [], []
        for window in windows:
            ok = window.ok()
            if len(ok) == 0:
                return False
            throughputs.append(len(ok) / window.seconds)
            values = np.sort(ok[:, _LATENCY])
            p = self.settings.percentile
            latencies.append(float(values.mean()) if p is None else _percentile(values, p))
        for series in (throughputs, latencies):
            mean = sum(series) / len(series)
            if mean <= 0 or any(abs(v / mean - 1) > threshold for v in series):
                return False
        return True
