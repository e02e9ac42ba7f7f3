"""The Prometheus endpoint (``GET /metrics`` on ``--metrics-port``), as a tiny ASGI app.

The document is built on the event loop, where the schedulers write their counters, so a scrape
reads every model's figures at one consistent point (see :mod:`naiad.metrics`).
"""

from __future__ import annotations

from naiad.frontends.http.asgi import Receive, Scope, Send
from naiad.metrics.exposition import CONTENT_TYPE
from naiad.metrics.registry import ServerMetrics


class MetricsEndpoint:
    def __init__(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            status, body, ctype = 404, b'{"error":"Not Found"}', b"application/json"
        elif scope["method"] != "GET":
            status, body, ctype = 405, b'{"error":"Method Not Allowed"}', b"application/json"
        else:
            status, body, ctype = 200, await self.metrics.exposition(), CONTENT_TYPE.encode()
        headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
