"""Raw HTTP for tests that must send what no well-behaved client would."""

from __future__ import annotations

import http.client
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class RawResponse:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> str:
        document = self.json()
        assert isinstance(document, dict) and isinstance(document.get("error"), str), self.body
        return str(document["error"])


class RawClient:
    """A keep-alive HTTP/1.1 connection to ``host:port``; reconnects when the server closes it."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        host, port = url.rsplit(":", 1)
        self._host, self._port, self._timeout = host, int(port), timeout
        self._conn = http.client.HTTPConnection(host, int(port), timeout=timeout)

    def request(
        self, method: str, path: str, body: bytes | str | None = None, headers: dict[str, str] | None = None
    ) -> RawResponse:
        data = body.encode() if isinstance(body, str) else body
        for attempt in range(2):
            try:
                self._conn.request(method, path, body=data, headers=headers or {})
                response = self._conn.getresponse()
                payload = response.read()
                return RawResponse(response.status, {k.lower(): v for k, v in response.getheaders()}, payload)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._conn.close()
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def post_json(self, path: str, document: Any, headers: dict[str, str] | None = None) -> RawResponse:
        return self.request("POST", path, json.dumps(document), headers)

    def close(self) -> None:
        self._conn.close()


def infer_concurrently(url: str, model: str, bodies: list[dict[str, Any]]) -> list[dict[str, list[Any]]]:
    """Each JSON inference body on a connection and thread of its own, at once (so that a batcher can
    batch them); each answer's outputs by name, in the order of ``bodies``."""

    def post(body: dict[str, Any]) -> dict[str, list[Any]]:
        client = RawClient(url, timeout=60)
        try:
            response = client.post_json(f"/v2/models/{model}/infer", body)
        finally:
            client.close()
        assert response.status == 200, response.body
        return {o["name"]: o["data"] for o in response.json()["outputs"]}

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(post, bodies))
