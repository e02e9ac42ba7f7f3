"""``naiad_forwarded_requests_total{model}``: requests this server sent to a peer holding their model.

Read from the peers table's counter when ``/metrics`` is scraped (:mod:`naiad.repository.peers`); with
frontend workers, each worker's forwards are counted here in the engine, which serves the metrics.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from naiad.repository.peers import Peers


class ForwardingMetrics(Collector):
    """Forwarded requests by model, read when ``/metrics`` is scraped."""

    def __init__(self, peers: Peers) -> None:
        self._peers = peers

    def collect(self) -> Iterator[Metric]:
        family = Metric(
            "naiad_forwarded_requests",
            "Requests for a model not served here, forwarded to a peer server that holds it",
            "counter",
        )
        for name, count in sorted(self._peers.forwarded.items()):
            family.add_sample("naiad_forwarded_requests_total", {"model": name}, count)
        yield family
