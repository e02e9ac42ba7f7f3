"""HTTP requests for a model another server holds, sent there and answered with what it answers.

The data plane decides that a request goes to a peer (:meth:`naiad.dataplane.DataPlane.peer`); this
relay sends the request as it came (method, path, query, headers, body still compressed if it was) to
the peer's HTTP port with the ``naiad-forwarded`` header, and gives back the peer's status, headers
and body unchanged, so a client cannot tell which server answered.  Connections to peers are kept open
and reused (one aiohttp session per frontend).  A peer that cannot be reached is the client's 503
UNAVAILABLE, naming the model and the peer.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable

import aiohttp

from naiad.core.errors import UnavailableError
from naiad.repository.peers import FORWARDED_HEADER, Peer

#: Headers about one connection (RFC 9110 section 7.6.1) or set by the server that sends a message.
_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"host",
        b"content-length",
        b"date",
        b"server",
    }
)

#: An answer: status, body (bytes, or chunks of an event stream) and headers.
Reply = tuple[int, bytes | AsyncGenerator[bytes, None], list[tuple[bytes, bytes]]]


class HttpRelay:
    """Sends requests to peers' HTTP ports; ``await close()`` at exit."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                auto_decompress=False,  # the body goes on as the peer encoded it, with its content-encoding
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
                timeout=aiohttp.ClientTimeout(total=None, connect=10),
            )
        return self._session

    async def relay(
        self,
        peer: Peer,
        model: str,
        method: str,
        target: str,
        headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
    ) -> Reply:
        """``target``: the path and query as the client sent them."""
        sent = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers if k.lower() not in _HOP]
        sent.append((FORWARDED_HEADER, "1"))
        url = f"http://{peer.http_address}{target}"
        try:
            response = await self._client().request(method, url, headers=sent, data=body or None)
        except (aiohttp.ClientError, OSError) as error:
            raise UnavailableError(
                f"model '{model}' is served by peer {peer.http_address}, which cannot be reached: "
                f"{error or type(error).__name__}"
            ) from None
        answer = [(k, v) for k, v in response.raw_headers if k.lower() not in _HOP]
        if response.content_type == "text/event-stream":
            return response.status, _chunks(response), answer
        try:
            content = await response.read()
        except (aiohttp.ClientError, OSError) as error:
            raise UnavailableError(
                f"model '{model}': peer {peer.http_address} failed while answering: {error}"
            ) from None
        finally:
            response.release()
        return response.status, content, answer

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


async def _chunks(response: aiohttp.ClientResponse) -> AsyncGenerator[bytes, None]:
    """An event stream passed on as its chunks arrive."""
    try:
        async for chunk in response.content.iter_any():
            yield chunk
    finally:
        response.release()
