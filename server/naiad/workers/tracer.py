"""A frontend worker's tracer: it records traces, the engine samples them.

``trace_rate``, ``trace_count`` and ``log_frequency`` count the server's requests, and a worker sees
only its own, so sampling cannot happen here.  Instead, while a model's settings may trace at all,
every request to it is traced *provisionally* (its timestamps are collected), and the engine, which
sees every worker's requests, gives its verdict in the request's final answer
(:meth:`~naiad.tracing.tracer.Tracer.sample`).  A sampled trace's records go back to the engine
(:class:`~naiad.ipc.messages.TraceEnd`), which holds them and writes the trace file, so its file
index and ``log_frequency`` grouping are the server's too.  A request that never reached the engine
(refused while decoding) is sampled when its trace ends.  With OpenTelemetry the worker exports the
spans of the traces the engine sampled itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from naiad.core.errors import InferenceServerError
from naiad.ipc.messages import NOT_SAMPLED, TraceEnd
from naiad.tracing.config import TraceConfig
from naiad.tracing.trace import Trace
from naiad.tracing.tracer import Tracer

#: ``Trace.id`` of a provisional trace the engine has not ruled on yet.
UNDECIDED = 0


class WorkerTracer(Tracer):
    """:class:`Tracer` whose sampling and trace file are the engine's; ``send`` carries a
    :class:`TraceEnd` to it."""

    def __init__(self, config: TraceConfig | None, send: Callable[[TraceEnd], None]) -> None:
        super().__init__(config)
        self._send = send
        #: Provisional traces by their timestamp list: what the request carries to the engine link.
        self._open: dict[int, Trace] = {}

    def begin(
        self, model: str, protocol: str, headers: Mapping[str, str] | None = None, start_ns: int = 0
    ) -> Trace | None:
        scope = self._models.get(model, self._global)
        if scope.level == ("OFF",):
            return None
        context = self._context(headers)
        if context is None and not (scope.rate and self._valid(scope)):
            return None  # no request to this model can be sampled (the engine's settings say the same)
        trace = Trace(UNDECIDED, scope, model, protocol, start_ns or time.monotonic_ns(), context)
        self._open[id(trace.timestamps)] = trace
        return trace

    def verdict(self, timestamps: list[tuple[str, int]], trace_id: int) -> None:
        """The engine's verdict on the request whose timestamp list is ``timestamps``."""
        trace = self._open.get(id(timestamps))
        if trace is not None and trace.timestamps is timestamps:
            trace.id = trace_id

    def end(self, trace: Trace) -> None:
        trace.sent()
        self._open.pop(id(trace.timestamps), None)
        if trace.id == NOT_SAMPLED:
            return
        if self._export is not None:
            if trace.id == UNDECIDED:
                self._hand_back(TraceEnd(UNDECIDED, trace.model, []))  # counted all the same
            if trace.id != UNDECIDED or trace.context is not None:
                self._export.export(trace)
            return
        self._hand_back(TraceEnd(trace.id, trace.model, self._records(trace, trace.scope.level)))

    def _hand_back(self, message: TraceEnd) -> None:
        try:
            self._send(message)
        except InferenceServerError:  # the engine is gone: so is its trace file
            pass
