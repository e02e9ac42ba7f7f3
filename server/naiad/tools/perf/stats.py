"""The server's side of a measurement: the statistics extension read before and after, subtracted."""

from __future__ import annotations

from dataclasses import dataclass, fields

from naiad.tools.perf.control import Json

_DURATIONS = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)


@dataclass(frozen=True)
class ServerStats:
    """Counters of one model version (ns totals and counts), as the statistics extension reports them."""

    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    success_ns: int = 0
    fail_count: int = 0
    fail_ns: int = 0
    queue_count: int = 0
    queue_ns: int = 0
    compute_input_count: int = 0
    compute_input_ns: int = 0
    compute_infer_count: int = 0
    compute_infer_ns: int = 0
    compute_output_count: int = 0
    compute_output_ns: int = 0
    cache_hit_count: int = 0
    cache_hit_ns: int = 0
    cache_miss_count: int = 0
    cache_miss_ns: int = 0

    @classmethod
    def parse(cls, answer: Json, model: str, version: str) -> ServerStats:
        """The entry for ``model`` (``version``, or the only/first one) of a statistics answer."""
        entries = [e for e in answer.get("model_stats", []) if e.get("name") == model]
        if version:
            entries = [e for e in entries if str(e.get("version")) == version] or entries
        if not entries:
            return cls()
        values: dict[str, int] = {}
        for entry in entries:
            inference = entry.get("inference_stats", {})
            add = {
                "inference_count": int(entry.get("inference_count", 0)),
                "execution_count": int(entry.get("execution_count", 0)),
            }
            for key in _DURATIONS:
                stat = inference.get(key, {})
                add[f"{key}_count"] = int(stat.get("count", 0))
                add[f"{key}_ns"] = int(stat.get("ns", 0))
            for key, value in add.items():
                values[key] = values.get(key, 0) + value
        return cls(**values)

    def __sub__(self, other: ServerStats) -> ServerStats:
        return ServerStats(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def __add__(self, other: ServerStats) -> ServerStats:
        return ServerStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def average_us(self, key: str) -> float:
        count = getattr(self, f"{key}_count")
        return getattr(self, f"{key}_ns") / count / 1000 if count else 0.0
