"""Prometheus metrics with Triton's names, types and labels, read from the server's own counters.

Nothing here runs per request: schedulers count into plain integers
(:class:`~naiad.scheduling.stats.SchedulerStats`) and the collectors read them when ``/metrics`` is
scraped; CPU and GPU gauges are refreshed by one background thread every ``--metrics-interval-ms``.
Only the composition root and the frontends import this package.
"""
