"""uvicorn's httptools protocol, with each response leaving in one system call.

ASGI sends a response as two messages (``http.response.start``, then the body), and uvicorn writes
each to the socket as it comes: two ``send`` calls per answer.  On loopback and in a pod's network
namespace each of those runs the whole TCP path, the receiver's half included, so the header write
alone was ~9% of the server's CPU per ``add_sub`` request (py-spy, one core).  Here the connection's
writes are held until the response completes, or until the loop's next turn for a response that
streams (SSE, chunked), and then go out together (``writelines``: one ``writev`` on uvloop, no copy
of the body).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescedTransport:
    """A connection's transport whose writes wait for :meth:`flush`, or for the loop's next turn.

    Everything that ends the connection (``close``, ``write_eof``) sends what waits first; ``abort``
    drops it, as the transport's own buffer is dropped.
    """

    __slots__ = ("_loop", "_pending", "_scheduled", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes | bytearray | memoryview] = []
        self._scheduled = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._pending.append(data)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush_later)

    def writelines(self, lines: Iterable[bytes | bytearray | memoryview]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        self._pending = []
        if self._transport.is_closing():
            return
        if len(pending) == 1:
            self._transport.write(pending[0])
        else:
            self._transport.writelines(pending)

    def _flush_later(self) -> None:
        self._scheduled = False
        self.flush()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(part) for part in self._pending)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def __getattr__(self, name: str) -> Any:  # the rest of asyncio.Transport, rarely called
        return getattr(self._transport, name)


#: Chunks with data a chunked request may have (Triton's ``kMaxChunkedChunks``).
MAX_CHUNKS = 1 << 16


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a :class:`CoalescedTransport`, flushed as each response
    completes (before uvicorn starts a pipelined request or arms the keep-alive timer).

    A request with both ``Transfer-Encoding: chunked`` and ``Content-Length`` is read as chunked, as
    HTTP/1.1 says (RFC 9112 6.3: the encoding overrides the length) and as Triton reads it, not
    refused as llhttp does by default: Python's ``requests`` sends both when the caller sets the
    encoding itself (NVIDIA's qa ``L0_http`` does).  The proxies in front of a pod (nginx, Envoy)
    refuse or normalize such requests, so none can read the length where this server reads chunks.
    """

    _chunks = 0
    _refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescedTransport(transport, self.loop))  # type: ignore[arg-type]
        self.parser.set_dangerous_leniencies(lenient_chunked_length=True)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._chunks = 0

    def on_chunk_header(self) -> None:
        """A chunked request may have :data:`MAX_CHUNKS` chunks with data, as in Triton (each costs the
        server far more than its bytes): past them it is answered 400 and the connection closed,
        reading no more of it.  (The closing chunk, empty, has a header too.)"""
        self._chunks += 1
        if self._chunks <= MAX_CHUNKS + 1 or self._refused:
            return
        self._refused = True
        body = orjson.dumps(
            {
                "error": f"Chunked request body exceeds maximum of {MAX_CHUNKS} non-empty chunks. Send fewer "
                "or larger HTTP chunks."
            }
        )
        head = (
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
        )
        self.transport.pause_reading()
        self.transport.write(head + body)
        self.transport.close()

    def on_response_complete(self) -> None:
        self.transport.flush()  # type: ignore[attr-defined]
        super().on_response_complete()
