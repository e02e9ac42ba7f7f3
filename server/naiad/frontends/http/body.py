"""Reading request bodies within ``--http-max-input-size``, including compressed ones.

The limit is checked against ``Content-Length`` before reading and against the bytes received while
reading, and a compressed body is inflated with the same bound, so neither a lying length nor a
decompression bomb can make the server allocate past the limit.
"""

from __future__ import annotations

import zlib

from naiad.core.errors import InvalidArgumentError, UnsupportedError
from naiad.frontends.http.asgi import Receive


def _too_large(size: int, limit: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"Request JSON size of {size} bytes exceeds the maximum allowed value of {limit} bytes. "
        "Use --http-max-input-size to increase the limit."
    )


async def read_body(receive: Receive, content_length: int | None, limit: int) -> bytes:
    if content_length is not None and content_length > limit:
        raise _too_large(content_length, limit)
    first = await receive()
    body: bytes = first.get("body", b"")
    if not first.get("more_body", False):
        if len(body) > limit:
            raise _too_large(len(body), limit)
        return body
    parts = [body]
    size = len(body)
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidArgumentError("client disconnected before sending the whole request")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit)
        parts.append(chunk)
        more = message.get("more_body", False)
    return b"".join(parts)


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """Inflate a gzip/deflate body without ever producing more than ``limit`` bytes."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        inflater = zlib.decompressobj()
    else:
        raise UnsupportedError("Unsupported compression type")
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InvalidArgumentError(f"failed to decompress the request body: {exc}") from None
    if len(out) > limit:
        raise _too_large(len(out), limit)
    if not inflater.eof:
        raise InvalidArgumentError("failed to decompress the request body: truncated stream")
    return out


def compress(body: bytes, accept_encoding: str) -> tuple[bytes, str | None]:
    """Compress a response when the client accepts gzip or deflate (gzip preferred)."""
    accepted = accept_encoding.lower()
    if "gzip" in accepted:
        deflater = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return deflater.compress(body) + deflater.flush(), "gzip"
    if "deflate" in accepted:
        return zlib.compress(body, 6), "deflate"
    return body, None
