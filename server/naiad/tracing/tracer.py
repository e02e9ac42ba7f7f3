"""Trace settings (global and per model), sampling, and where finished traces go.

Settings follow Triton's trace extension: ``trace_level``, ``trace_rate``, ``trace_count`` and
``log_frequency`` can be set globally or per model at run time (``trace_file`` and ``trace_mode``
only at start).  A model's settings override some keys and follow the global value for the others;
``null`` clears a key (a global key back to its ``--trace-config`` value, a model's back to the
global one).  Each settings object samples on its own: every ``trace_rate``-th request is traced
while ``trace_count`` (-1: no limit) is not used up.  Updating settings starts a new object, as in
Triton: its counters start again and the traces the old one still held are written out.

With frontend workers the engine's tracer is the one that samples and writes (:meth:`Tracer.sample`,
:meth:`Tracer.collect`): the workers trace provisionally and hand sampled traces back
(:mod:`naiad.workers.tracer`), so the counting is the server's whatever worker a request took.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from naiad.core.errors import InvalidArgumentError, UnsupportedError
from naiad.tracing.config import TraceConfig
from naiad.tracing.file import TraceFile
from naiad.tracing.trace import Trace, tensor_entry

log = logging.getLogger("naiad.tracing")

#: The settings a client may change, in the order Triton reports them.
KEYS = ("trace_level", "trace_rate", "trace_count", "log_frequency")
#: ``trace_level`` values a client may set.
_LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")

Changes = Mapping[str, Sequence[str] | None]
#: Traces sampled for workers and not collected yet, at most (a worker that dies never hands its back).
_SAMPLED_MAX = 10_000
#: What :func:`_parse` answers for a key an update leaves as it is (Triton ignores unknown levels).
_UNCHANGED = object()


class TraceScope:
    """One settings object: its values, which of them it sets itself, its counters and held traces."""

    def __init__(self, values: dict[str, Any], own: dict[str, Any]) -> None:
        self.level: tuple[str, ...] = values["trace_level"]
        self.rate: int = values["trace_rate"]
        self.count: int = values["trace_count"]
        self.log_frequency: int = values["log_frequency"]
        self.own = own
        self.sample = 0
        self.created = 0
        self.collected = 0
        self.held: list[dict[str, Any]] = []
        self.held_traces = 0
        self.retired = False

    def values(self) -> dict[str, Any]:
        return {
            "trace_level": self.level,
            "trace_rate": self.rate,
            "trace_count": self.count,
            "log_frequency": self.log_frequency,
        }


class Tracer:
    """The server's tracing: ``begin`` a trace per request (``None`` when not sampled), ``end`` it."""

    def __init__(self, config: TraceConfig | None = None) -> None:
        self.config = config = config or TraceConfig()
        self.mode = config.mode
        self._defaults = {
            "trace_level": config.level,
            "trace_rate": config.rate,
            "trace_count": config.count,
            "log_frequency": config.log_frequency,
        }
        self._file = TraceFile(config.file) if config.file else None
        self._global = TraceScope(dict(self._defaults), {})
        self._models: dict[str, TraceScope] = {}
        self._ids = itertools.count(1)
        #: Traces sampled for a frontend worker, by id, until it hands their records back.
        self._sampled: dict[int, TraceScope] = {}
        self._export: Any = None
        if self.mode == "opentelemetry":
            from naiad.tracing.otel import OpenTelemetryExport

            self._export = OpenTelemetryExport(config.opentelemetry)
        #: Whether any settings trace at all: the one check an untraced request pays.
        self.enabled = False
        self._refresh()
        reason = self._invalid(self._global)
        if self.enabled and reason:
            log.warning("no request will be traced until the settings change: %s", reason)

    # ---- requests -------------------------------------------------------------------------------

    def begin(
        self, model: str, protocol: str, headers: Mapping[str, str] | None = None, start_ns: int = 0
    ) -> Trace | None:
        """A trace for a request to ``model`` if it is sampled (``protocol``: ``HTTP`` or ``GRPC``)."""
        scope = self._models.get(model, self._global)
        if scope.level == ("OFF",):
            return None
        context = self._context(headers)
        if not self._sample(scope, context):
            return None
        return Trace(next(self._ids), scope, model, protocol, start_ns or time.monotonic_ns(), context)

    def end(self, trace: Trace) -> None:
        """The response is sent: write the trace out (file) or export its spans (OpenTelemetry)."""
        trace.sent()
        if self._export is not None:
            self._export.export(trace)
            return
        self._collect(trace.scope, self._records(trace, trace.scope.level))

    # ---- requests traced in frontend workers ------------------------------------------------------

    def sample(self, model: str, headers: Mapping[str, str] | None = None) -> int:
        """Count a request that a frontend worker traces provisionally, here where the requests of
        every worker are counted (so ``trace_rate`` and ``trace_count`` are the server's, not each
        worker's): the trace's id, or 0 when the request is not traced.  The worker hands the trace's
        records back to :meth:`collect`."""
        scope = self._models.get(model, self._global)
        if scope.level == ("OFF",) or not self._sample(scope, self._context(headers)):
            return 0
        trace_id = next(self._ids)
        if self._export is None:  # spans are exported by the worker itself
            sampled = self._sampled
            sampled[trace_id] = scope
            if len(sampled) > _SAMPLED_MAX:  # traces of a worker that died are never collected
                del sampled[next(iter(sampled))]
        return trace_id

    def collect(self, trace_id: int, model: str, records: list[dict[str, Any]]) -> None:
        """A worker's finished trace: ``trace_id`` from :meth:`sample`, or 0 for a request that never
        reached the engine (it is counted now, and its records take the id it gets)."""
        if not trace_id:
            trace_id = self.sample(model)
            if not trace_id:
                return
            for record in records:
                record["id"] = trace_id
        scope = self._sampled.pop(trace_id, None)
        if scope is not None:
            self._collect(scope, records)

    def _context(self, headers: Mapping[str, str] | None) -> Any:
        """The trace context a request carries (OpenTelemetry only): such a request is always traced."""
        if self._export is not None and headers:
            return self._export.extract(headers)
        return None

    def _sample(self, scope: TraceScope, context: Any) -> bool:
        """Count one request against ``scope``'s rate and count: whether it is traced."""
        hit = False
        if scope.rate:
            if not self._valid(scope) and context is None:
                return False
            scope.sample += 1
            hit = scope.sample % scope.rate == 0
            if hit and scope.count > 0:
                scope.count -= 1
                scope.created += 1
            elif hit and scope.count == 0:
                hit = False
        return hit or context is not None

    def _collect(self, scope: TraceScope, records: list[dict[str, Any]]) -> None:
        """Hold a finished trace's records, and write them out every ``log_frequency`` traces."""
        if scope.retired:
            self._save(records, scope.log_frequency != 0)
            return
        scope.held += records
        scope.held_traces += 1
        scope.collected += 1
        exhausted = scope.count == 0 and scope.collected == scope.created
        if exhausted or (scope.log_frequency and scope.held_traces >= scope.log_frequency):
            self._save(scope.held, True)
            scope.held, scope.held_traces = [], 0

    def _records(self, trace: Trace, level: tuple[str, ...]) -> list[dict[str, Any]]:
        header: dict[str, Any] = {"id": trace.id, "model_name": trace.model, "model_version": trace.version}
        if trace.request_id:
            header["request_id"] = trace.request_id
        records: list[dict[str, Any]] = []
        if "TIMESTAMPS" in level:
            for name, ns in trace.ordered():
                if name == "REQUEST_START":
                    records.append(header)
                records.append({"id": trace.id, "timestamps": [{"name": name, "ns": ns}]})
        if header not in records:
            records.insert(0, header)
        if "TENSORS" in level:
            records += [tensor_entry(trace.id, activity, tensor) for activity, tensor in trace.tensors()]
        return records

    def _save(self, records: list[dict[str, Any]], indexed: bool) -> None:
        if self._file is not None:
            self._file.save(records, indexed)

    # ---- settings -------------------------------------------------------------------------------

    def settings(self, model: str = "") -> dict[str, Any]:
        """Triton's trace settings document for the global settings, or those ``model`` sees."""
        scope = self._models.get(model, self._global) if model else self._global
        return {
            "trace_level": list(scope.level),
            "trace_rate": str(scope.rate),
            "trace_count": str(scope.count),
            "log_frequency": str(scope.log_frequency),
            "trace_file": self.config.file,
            "trace_mode": self.mode,
        }

    def update(self, model: str, changes: Changes) -> dict[str, Any]:
        """Apply a settings update (values as Triton's lists of strings, ``None`` to clear)."""
        if "trace_file" in changes:
            raise UnsupportedError("trace file location can not be updated through network protocol")
        parsed = {key: _parse(key, changes[key]) for key in KEYS if key in changes}
        parsed = {key: value for key, value in parsed.items() if value is not _UNCHANGED}
        current = self._models.get(model) if model else self._global
        own = dict(current.own) if current is not None else {}
        for key, value in parsed.items():
            if value is None:
                own.pop(key, None)
            else:
                own[key] = value
        fallback = self._defaults if not model else self._global.values()
        scope = TraceScope({**fallback, **own}, own)
        reason = self._invalid(scope)
        if reason and scope.level != ("OFF",):
            raise InvalidArgumentError(f"Attempting to set invalid trace setting :{reason}")
        if current is not None:
            self._retire(current)
        if not model:
            self._global = scope
            for name, model_scope in list(self._models.items()):  # models follow the keys they do not set
                if len(model_scope.own) < len(KEYS):
                    self._retire(model_scope)
                    self._models[name] = TraceScope({**scope.values(), **model_scope.own}, model_scope.own)
        elif own:
            self._models[model] = scope
        else:
            self._models.pop(model, None)
        self._refresh()
        return self.settings(model)

    def close(self) -> None:
        """Write every trace still held and close the trace file (or flush the span exporter)."""
        for scope in [self._global, *self._models.values()]:
            self._retire(scope)
        if self._file is not None:
            self._file.close()
        if self._export is not None:
            self._export.close()

    def _retire(self, scope: TraceScope) -> None:
        scope.retired = True
        self._save(scope.held, scope.log_frequency != 0)
        scope.held, scope.held_traces = [], 0

    def _invalid(self, scope: TraceScope) -> str:
        """Why ``scope`` cannot trace ("" when it can), as Triton words it."""
        if scope.level == ("OFF",):
            return "tracing is disabled"
        if scope.rate == 0 and self.mode == "triton":
            return "sample rate must be non-zero"
        if self.mode == "triton" and self._file is None:
            return "trace file name is not given"
        return ""

    def _valid(self, scope: TraceScope) -> bool:
        return scope.count != 0 and not self._invalid(scope)

    def _refresh(self) -> None:
        self.enabled = any(scope.level != ("OFF",) for scope in [self._global, *self._models.values()])


#: What a C ``int`` holds: the range Triton parses the numbers of a trace setting in.
_INT32 = (-(2**31), 2**31 - 1)


def _parse(key: str, values: Sequence[str] | None) -> Any:
    """One key of an update: its new value, ``None`` to clear it, or ``_UNCHANGED`` to ignore it."""
    if values is None:
        return None
    if key == "trace_level":
        levels = [value for value in values if value in _LEVELS]
        if "OFF" in levels and len(levels) > 1:
            raise InvalidArgumentError("Expect only one trace level 'OFF' is specified")
        return tuple(dict.fromkeys(levels)) if levels else _UNCHANGED
    if len(values) != 1:
        raise InvalidArgumentError(f"expect only 1 value for '{key}'")
    text = values[0]
    try:
        number = int(text)
    except ValueError:
        raise InvalidArgumentError(f"Unable to parse '{key}', got: {text}") from None
    if not _INT32[0] <= number <= _INT32[1]:  # (Triton reads them with std::stoi)
        low, high = (-1, _INT32[1]) if key == "trace_count" else (0, 2**32 - 1)
        raise InvalidArgumentError(
            f"Unable to parse '{key}', value is out of range [ {low}, {high} ], got: {text}"
        )
    if key == "trace_count" and number < -1:
        raise InvalidArgumentError(f"Unable to parse 'trace_count'. Expecting value >= -1, got:{text}")
    if key != "trace_count" and number < 0:
        raise InvalidArgumentError(f"Unable to parse '{key}', got: {text}")
    return number
