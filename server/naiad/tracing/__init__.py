"""Triton's trace extension: sampled requests' timestamps, to a JSON trace file or OpenTelemetry.

A frontend asks the :class:`~naiad.tracing.tracer.Tracer` whether to trace each request; only a
sampled request carries a timestamp list, which the frontend, the data plane's scheduler and the
model's execution append to.  Unsampled requests cost one attribute check in each of those places.
"""
