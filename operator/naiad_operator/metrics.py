"""The operator's own Prometheus metrics (``/metrics`` on ``NAIAD_OPERATOR_METRICS_PORT``).

What a platform team watches about the operator itself, beside the servers' ``nv_inference_*``: how
long passes take and how often they fail, per kind; how long each rollout stage takes; model loads
that failed and models blocked after a failed rollout; sync Jobs by result, with their durations and
bytes; and how many Kubernetes API requests the operator makes (the watches should keep that near one
read per pass). One registry per operator, passed down (no module-level metrics): tests and a second
operator in one process never share counters.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

#: Reconcile passes take milliseconds; rollout stages wait for model loads (minutes for large models).
PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
STAGE_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200)
SYNC_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.reconcile_seconds = Histogram(
            "naiad_operator_reconcile_duration_seconds",
            "Duration of one reconcile pass, by kind",
            ["kind"],
            buckets=PASS_BUCKETS,
            registry=r,
        )
        self.reconcile_errors = Counter(
            "naiad_operator_reconcile_errors_total",
            "Reconcile passes that raised, by kind",
            ["kind"],
            registry=r,
        )
        self.stage_seconds = Histogram(
            "naiad_operator_rollout_stage_duration_seconds",
            "Duration of one in-place rollout stage (Load, Switch, Unload) across a service's pods",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=r,
        )
        self.load_failures = Counter(
            "naiad_operator_model_load_failures_total",
            "Model rollouts whose new versions did not come up on every pod (rolled back), by namespace",
            ["namespace"],
            registry=r,
        )
        self.blocked_models = Gauge(
            "naiad_operator_blocked_models",
            "Models held at their previous versions after a failed rollout (BlockedByFailedLoad)",
            ["namespace", "inferenceservice"],
            registry=r,
        )
        self.syncs = Counter(
            "naiad_operator_syncs_total", "Finished sync Jobs, by result", ["result"], registry=r
        )
        self.sync_seconds = Histogram(
            "naiad_operator_sync_duration_seconds",
            "Duration of successful syncs (naiad repo sync's own measure)",
            buckets=SYNC_BUCKETS,
            registry=r,
        )
        self.sync_bytes = Counter(
            "naiad_operator_sync_bytes_total", "Bytes sync Jobs downloaded (changed files only)", registry=r
        )
        self.api_requests = Counter(
            "naiad_operator_api_requests_total",
            "Kubernetes API requests of the operator's passes (kopf's watches not included), by method",
            ["method"],
            registry=r,
        )

    def serve(self, port: int) -> None:
        """Serve ``/metrics`` on ``port`` from a background thread (0: not at all)."""
        if port:
            server, _ = start_http_server(port, registry=self.registry)
            self._server = server

    def close(self) -> None:
        server = getattr(self, "_server", None)
        if server is not None:
            server.shutdown()
            server.server_close()
