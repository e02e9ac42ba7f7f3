"""A framed, typed message channel over a stream socket, for asyncio.

Frames are a 4-byte little-endian length and a MessagePack body.  Sending queues the encoded frame and,
once per turn of the event loop, writes every queued frame with one system call: under load one wake-up
of the receiver carries many messages, and the sender pays one ``write`` for all of them.  Receiving
decodes every complete frame a read returned and hands each to ``on_message`` in order; what the
handlers send meanwhile (answers computed at once) is written with one call when they are done.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec

M = TypeVar("M")

_LENGTH = struct.Struct("<I")
#: Largest frame accepted: a tensor sent inline is at most the HTTP/gRPC input limit (2 GiB).
MAX_FRAME = 2**31


class Channel(asyncio.Protocol, Generic[M]):
    """One end of a channel: ``send(message)``; incoming messages go to ``on_message``."""

    def __init__(self, kind: Any, on_message: Callable[[M], None], on_lost: Callable[[], None]) -> None:
        self._decoder: msgspec.msgpack.Decoder[M] = msgspec.msgpack.Decoder(kind)
        self._encoder = msgspec.msgpack.Encoder()
        self._on_message = on_message
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        #: The loop that reads the transport, known from ``connection_made``: asked for per send, it
        #: would cost a ``getpid`` system call each time on Python 3.11 (its fork check).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._buffer = bytearray()
        self._needed = 0  # bytes the buffer must hold before its first frame is complete
        self._queued: list[bytes] = []
        self._flush_scheduled = False
        self._dispatching = False  # in data_received: sends are written when it returns
        self.closed = False

    # ---- asyncio.Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is a Transport, not a subclass
        self._loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        if buffer:
            buffer += data
            if len(buffer) < self._needed:
                return  # the frame begun earlier is still incomplete: no copy, no decoding yet
            data = bytes(buffer)
            buffer.clear()
        # Frames are decoded straight from ``data`` (immutable, so decoded ``Raw`` fields may keep it):
        # only an incomplete last frame is copied, into the buffer.
        start = 0
        end = len(data)
        decode = self._decoder.decode
        messages: list[M] = []
        with memoryview(data) as view:
            while end - start >= 4:
                (length,) = _LENGTH.unpack_from(view, start)
                if length > MAX_FRAME:
                    raise ConnectionError(f"frame of {length} bytes on the engine channel")
                stop = start + 4 + length
                if stop > end:
                    break
                messages.append(decode(view[start + 4 : stop]))
                start = stop
            if start < end:
                buffer += view[start:]
                self._needed = stop - start if end - start >= 4 else 4
        # What the handlers send meanwhile goes out in one write once they are all done.
        self._dispatching = True
        try:
            for message in messages:
                self._on_message(message)
        finally:
            self._dispatching = False
        if self._queued:
            self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._on_lost()

    # ---- sending ------------------------------------------------------------------------------------

    def send(self, message: Any) -> None:
        if self.closed:
            return
        body = self._encoder.encode(message)
        self._queued += (_LENGTH.pack(len(body)), body)
        if not self._flush_scheduled and not self._dispatching:
            self._flush_scheduled = True
            (self._loop or asyncio.get_running_loop()).call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        queued, self._queued = self._queued, []
        if queued and self._transport is not None and not self.closed:
            # One buffer, one system call (uvloop's writelines writes each buffer on its own).
            self._transport.write(b"".join(queued))

    def close(self) -> None:
        if self._transport is not None:
            self._flush()
            self._transport.close()


async def connect(
    sock: socket.socket,
    kind: Any,
    on_message: Callable[[Any], None],
    on_lost: Callable[[], None],
    bind: Callable[[Channel[Any]], None],
) -> Channel[Any]:
    """Wrap a connected socket (one end of a socketpair) as a :class:`Channel`; ``bind`` gets it before
    the first message arrives (a handler may answer at once)."""
    loop = asyncio.get_running_loop()

    def made() -> Channel[Any]:
        channel: Channel[Any] = Channel(kind, on_message, on_lost)
        bind(channel)
        return channel

    _, channel = await loop.connect_accepted_socket(made, sock)
    return channel


def read_frame(sock: socket.socket, kind: Any) -> Any:
    """One frame read synchronously (a worker's :class:`~naiad.ipc.messages.Welcome`, before its loop)."""
    header = _recv_exactly(sock, 4)
    (length,) = _LENGTH.unpack(header)
    return msgspec.msgpack.decode(_recv_exactly(sock, length), type=kind)


def write_frame(sock: socket.socket, message: Any) -> None:
    body = msgspec.msgpack.encode(message)
    sock.sendall(_LENGTH.pack(len(body)) + body)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("the engine closed the channel")
        chunks += chunk
    return bytes(chunks)
