"""Reading request bodies within ``--http-max-input-size``, including compressed ones.

The limit is checked against ``Content-Length`` before reading and against the bytes received while
reading, and a compressed body is inflated with the same bound, so neither a lying length nor a
decompression bomb can make the server allocate past the limit.
"""

from __future__ import annotations

import zlib

from naiad.core.errors import InvalidArgumentError, UnsupportedError
from naiad.frontends.http.asgi import Receive


def _too_large(size: int, limit: int, raw: bool = False) -> InvalidArgumentError:
    """Triton's words: a raw binary request's (its body is the input) or a JSON request's."""
    if raw:
        return InvalidArgumentError(
            f"Raw input has a byte_size ({size} bytes) that exceeds the maximum allowed value of {limit} "
            "bytes. Use --http-max-input-size to increase the limit."
        )
    return InvalidArgumentError(
        f"request JSON size of {size} bytes exceeds the maximum allowed input size of {limit} bytes. "
        "Use --http-max-input-size to increase the limit."
    )


async def read_body(receive: Receive, content_length: int | None, limit: int, raw: bool = False) -> bytes:
    """The whole body, refused past ``limit`` (``raw``: the body is a raw binary request's input)."""
    if content_length is not None and content_length > limit:
        raise _too_large(content_length, limit, raw)
    first = await receive()
    body: bytes = first.get("body", b"")
    if not first.get("more_body", False):
        if len(body) > limit:
            raise _too_large(len(body), limit, raw)
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
            raise _too_large(size, limit, raw)
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
        raise InvalidArgumentError(
            f"Decompressed data size exceeds the maximum allowed value of {limit} bytes. Use "
            "--http-max-input-size to increase the limit."
        )
    if not inflater.eof:
        raise InvalidArgumentError("failed to decompress the request body: truncated stream")
    return out


def response_encoding(accept_encoding: str) -> str | None:
    """The encoding Triton picks for an ``Accept-Encoding`` value: ``gzip``, ``deflate`` or ``None``.

    Triton weighs each listed coding by its ``;q=`` value (1 when absent) among ``identity``, ``gzip``
    and ``deflate``; the first of the highest weight wins, malformed entries are skipped.  So
    ``gzip;q=0.5, deflate`` is deflate and ``identity, gzip`` is not compressed.
    """
    chosen, weight = "identity", 0.0
    for entry in accept_encoding.split(","):
        start = len(entry) - len(entry.lstrip(" "))
        name, has_weight, value = entry[start:].partition(";q=")
        if start == len(entry) or (has_weight and not name):
            continue
        try:
            entry_weight = float(value) if has_weight else 1.0
        except ValueError:
            continue
        if name in ("identity", "gzip", "deflate") and entry_weight > weight:
            chosen, weight = name, entry_weight
    return None if chosen == "identity" else chosen


def compress(body: bytes, encoding: str) -> bytes:
    """``body`` in ``gzip`` or ``deflate`` (zlib format), at zlib's default level as Triton."""
    if encoding == "gzip":
        deflater = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return deflater.compress(body) + deflater.flush()
    return zlib.compress(body, zlib.Z_DEFAULT_COMPRESSION)
