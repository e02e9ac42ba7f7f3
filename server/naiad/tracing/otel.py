"""``trace_mode opentelemetry``: a finished trace as OpenTelemetry spans, exported over OTLP/HTTP.

The spans are Triton's: a top-level ``InferRequest`` span (the frontend: receive to send), a span
named after the model (``REQUEST_START`` to ``REQUEST_END``, with ``triton.model_name``,
``triton.model_version``, ``triton.trace_id``, ``triton.trace_parent_id`` and ``triton.request_id``)
and its ``compute`` span; Naiad adds a ``queue`` span (``QUEUE_START`` to ``COMPUTE_START``) beside
``compute``.  Every timestamp is also an event on its span.  Spans are built when the request ends,
from timestamps taken on the monotonic clock and shifted to wall-clock time, and handed to the SDK's
batch span processor, whose own thread exports them.  A ``traceparent`` header continues the caller's
trace (and forces sampling, as in Triton).  The SDK is imported only in this mode (extra
``naiad[tracing]``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace as otel_trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from naiad.tracing.config import OpenTelemetryConfig
from naiad.tracing.trace import Trace

_SERVER = otel_trace.SpanKind.SERVER
#: Spans within the model span: (name, first event, last event).
_CHILDREN = (("queue", "QUEUE_START", "COMPUTE_START"), ("compute", "COMPUTE_START", "COMPUTE_END"))
_COMPUTE_EVENTS = ("COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END")


class OpenTelemetryExport:
    """The SDK pipeline: tracer provider, batch span processor, OTLP/HTTP exporter."""

    def __init__(self, config: OpenTelemetryConfig) -> None:
        self._provider = TracerProvider(resource=Resource.create(config.resource))
        self._provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(endpoint=config.url),
                max_queue_size=config.bsp_max_queue_size,
                schedule_delay_millis=config.bsp_schedule_delay_ms,
                max_export_batch_size=config.bsp_max_export_batch_size,
            )
        )
        self._tracer = self._provider.get_tracer("naiad")
        self._propagator = TraceContextTextMapPropagator()
        self._offset = time.time_ns() - time.monotonic_ns()

    def extract(self, headers: Mapping[str, str]) -> Context | None:
        """The caller's trace context from ``traceparent``/``tracestate``, if it sent a valid one."""
        if "traceparent" not in headers:
            return None
        context = self._propagator.extract(headers)
        return context if otel_trace.get_current_span(context).get_span_context().is_valid else None

    def export(self, trace: Trace) -> None:
        stamps = trace.ordered()
        at = {name: ns + self._offset for name, ns in stamps}
        root = self._span("InferRequest", trace.context, stamps[0][1] + self._offset)
        for name, ns in stamps:
            if name in trace.points:
                root.add_event(name, timestamp=ns + self._offset)
        if "REQUEST_START" in at:
            self._model_span(trace, root, stamps, at)
        root.end(end_time=stamps[-1][1] + self._offset)

    def _model_span(self, trace: Trace, root: Any, stamps: list[tuple[str, int]], at: dict[str, int]) -> None:
        attributes: dict[str, Any] = {
            "triton.model_name": trace.model,
            "triton.model_version": trace.version,
            "triton.trace_id": trace.id,
            "triton.trace_parent_id": 0,
        }
        if trace.request_id:
            attributes["triton.request_id"] = trace.request_id
        model = self._span(trace.model, otel_trace.set_span_in_context(root), at["REQUEST_START"], attributes)
        for name, ns in stamps:
            if name not in trace.points and name not in _COMPUTE_EVENTS:
                model.add_event(name, timestamp=ns + self._offset)
        inside = otel_trace.set_span_in_context(model)
        for span_name, first, last in _CHILDREN:
            if first in at and last in at:
                child = self._span(span_name, inside, at[first])
                if span_name == "compute":
                    for event in _COMPUTE_EVENTS:
                        child.add_event(event, timestamp=at[event])
                child.end(end_time=at[last])
        model.end(end_time=at["REQUEST_END"])

    def _span(
        self, name: str, context: Context | None, start: int, attributes: dict[str, Any] | None = None
    ) -> Any:
        return self._tracer.start_span(
            name, context=context, kind=_SERVER, start_time=start, attributes=attributes
        )

    def close(self) -> None:
        """Export what is still queued, then stop the processor's thread."""
        self._provider.shutdown()
