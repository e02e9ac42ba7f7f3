"""The Prometheus endpoint (``GET /metrics`` on ``--metrics-port``), as a tiny ASGI app."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from naiad.frontends.http.asgi import Receive, Scope, Send


class MetricsEndpoint:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            status, body, ctype = 404, b'{"error":"Not Found"}', b"application/json"
        elif scope["method"] != "GET":
            status, body, ctype = 405, b'{"error":"Method Not Allowed"}', b"application/json"
        else:
            status, body, ctype = 200, generate_latest(self.registry), CONTENT_TYPE_LATEST.encode()
        headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
