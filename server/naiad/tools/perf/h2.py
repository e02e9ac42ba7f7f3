"""Unary gRPC ``ModelInfer`` over a bare HTTP/2 connection: the fast path of ``naiad perf -i grpc``.

grpcio's Python client spends 200-300 us of CPU per call on this project's two-core machines (thread
hand-offs around its completion queue), more than the server it should measure; h2load spends a few.
This speaks just enough HTTP/2 for one request at a time per connection (as ``h2load -m 1`` does):
prebuilt HEADERS (HPACK literals that never touch the dynamic table) and one DATA frame per request,
the server's header blocks decoded with ``hpack`` (needed to keep its dynamic table in step), flow
control honoured for what we send and opened wide for what we receive, SETTINGS and PING answered.
A request over one frame (16 KiB) goes through grpcio instead (see :func:`fits`).
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import TYPE_CHECKING

import hpack
from tritonclient.grpc import service_pb2 as pb

if TYPE_CHECKING:
    from naiad.tools.perf.sources import Source
    from naiad.tools.perf.worker import HttpWorker

_now = time.monotonic_ns
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
MAX_FRAME = 16384
_DATA, _HEADERS, _RST, _SETTINGS, _PING, _GOAWAY, _WINDOW, _CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
_END_STREAM, _END_HEADERS, _PADDED, _PRIORITY, _ACK = 0x1, 0x4, 0x8, 0x20, 0x1
_BIG_WINDOW = 2**31 - 1


def fits(message: bytes) -> bool:
    """Whether a serialized request goes out as one DATA frame (5-byte gRPC prefix included)."""
    return len(message) + 5 <= MAX_FRAME


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload


def request_headers(authority: str, path: str) -> bytes:
    """The HPACK block of every request: literals never indexed, so no table state on either side."""
    fields = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", authority),
              ("content-type", "application/grpc"), ("te", "trailers")]
    return bytes(hpack.Encoder().encode([hpack.NeverIndexedHeaderTuple(n, v) for n, v in fields]))


def preface() -> bytes:
    """Client preface, our SETTINGS (push off, huge stream window) and a huge connection window."""
    settings = struct.pack(">HIHI", 0x2, 0, 0x4, _BIG_WINDOW)
    return (PREFACE + _frame(_SETTINGS, 0, 0, settings)
            + _frame(_WINDOW, 0, 0, (_BIG_WINDOW - 65535).to_bytes(4, "big")))


class GrpcH2Slot(asyncio.Protocol):
    """One HTTP/2 connection with at most one ``ModelInfer`` stream open (the HttpSlot interface)."""

    def __init__(self, worker: HttpWorker, source: Source) -> None:
        self.worker = worker
        self.source = source
        self.transport: asyncio.Transport | None = None
        self.decoder = hpack.Decoder()
        self.generation = 0
        self.blocks: dict[tuple[int, bytes], dict[str, str]] = {}
        self.buffer = bytearray()
        self.block = bytearray()  # a header block awaiting CONTINUATION
        self.block_flags = 0
        self.stream = -1
        self.send_window = 65535
        self.received = 0
        self.pending: bytes | None = None
        self.pending_size = 0
        self.body = bytearray()
        self.status = ""
        self.got_headers = False
        self.start = self.sent = self.arrived = 0
        self.busy = False
        self.active = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(preface())  # type: ignore[attr-defined]
        self.worker.connected(self)

    def send(self) -> None:
        assert self.transport is not None
        message = self.source.next()
        self.stream += 2
        self.busy = True
        self.body.clear()
        self.status, self.got_headers = "", False
        self.start = _now()
        data = b"\x00" + len(message).to_bytes(4, "big") + message
        frames = (_frame(_HEADERS, _END_HEADERS, self.stream, self.worker.h2_headers)
                  + _frame(_DATA, _END_STREAM, self.stream, data))
        if len(data) > self.send_window:
            self.pending = frames  # sent when the server's WINDOW_UPDATE makes room
            self.pending_size = len(data)
        else:
            self.send_window -= len(data)
            self.transport.write(frames)
        self.sent = _now()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while len(buffer) >= 9:
            length = int.from_bytes(buffer[:3], "big")
            if len(buffer) < 9 + length:
                return
            kind, flags = buffer[3], buffer[4]
            stream = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
            payload = bytes(buffer[9 : 9 + length])
            del buffer[: 9 + length]
            self._frame(kind, flags, stream, payload)

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == _DATA:
            self.received += len(payload)
            if flags & _PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            if stream == self.stream:
                self.body += payload
            if self.received > 2**30:
                self._write(_frame(_WINDOW, 0, 0, self.received.to_bytes(4, "big")))
                self.received = 0
        elif kind in (_HEADERS, _CONTINUATION):
            if kind == _HEADERS:
                if flags & _PADDED:
                    payload = payload[1 : len(payload) - payload[0]]
                if flags & _PRIORITY:
                    payload = payload[5:]
                self.block = bytearray(payload)
                self.block_flags = flags
            else:
                self.block += payload
            if flags & _END_HEADERS:
                fields = self._decode(bytes(self.block))  # always: keeps the dynamic table in step
                if self.busy and stream == self.stream:
                    self._headers(fields, bool(self.block_flags & _END_STREAM))
        elif kind == _SETTINGS and not flags & _ACK:
            self._write(_frame(_SETTINGS, _ACK, 0, b""))  # nothing the server may set changes what we send
        elif kind == _WINDOW and stream == 0:
            self.send_window += int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if self.pending is not None and self.pending_size <= self.send_window:
                frames, self.pending = self.pending, None
                self.send_window -= self.pending_size
                self._write(frames)
        elif kind == _PING and not flags & _ACK:
            self._write(_frame(_PING, _ACK, 0, payload))
        elif kind == _RST and stream == self.stream and self.busy:
            self._finish(f"stream reset by the server (HTTP/2 error {int.from_bytes(payload[:4], 'big')})")
        elif kind == _GOAWAY and self.transport is not None:
            self.transport.close()

    def _decode(self, block: bytes) -> dict[str, str]:
        """HPACK-decode a header block, remembering blocks that leave the dynamic table as it was.

        A server repeats the same few blocks (``:status 200`` and ``grpc-status 0`` as table references)
        once its table is warm; decoding them in pure Python would cost more than everything else per
        request.  A remembered block is keyed by the table's generation, which changes with the table.
        """
        key = (self.generation, block)
        fields = self.blocks.get(key)
        if fields is not None:
            return fields
        table = self.decoder.header_table.dynamic_entries
        before = (len(table), id(table[0]) if table else 0)
        fields = {str(name): str(value) for name, value in self.decoder.decode(block)}
        if (len(table), id(table[0]) if table else 0) != before:
            self.generation += 1
            self.blocks.clear()
        elif len(self.blocks) < 64:
            self.blocks[key] = fields
        return fields

    def _write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def _headers(self, fields: dict[str, str], end: bool) -> None:
        if not self.got_headers:
            self.got_headers = True
            self.arrived = _now()
            if fields.get(":status") != "200":
                self._finish(f"HTTP status {fields.get(':status')}")
                return
        if end:  # trailers, or a trailers-only answer
            status = fields.get("grpc-status", "")
            if status != "0":
                self._finish(f"gRPC status {status or 'missing'}: {fields.get('grpc-message', '')}")
            else:
                self._finish("")

    def _finish(self, problem: str) -> None:
        worker = self.worker
        self.busy = False
        if not problem:
            body = bytes(self.body)
            if len(body) < 5:
                problem = "gRPC answer without a message"
            else:
                response = pb.ModelInferResponse.FromString(body[5 : 5 + int.from_bytes(body[1:5], "big")])
                names = [output.name for output in response.outputs]
                missing = [n for n in worker.expected if n not in names]
                problem = f"response has no output '{missing[0]}'" if missing else ""
        end = _now()
        if problem:
            worker.tally.failed(self.start, end, problem)
        else:
            receive = end - (self.arrived or end)
            worker.tally.ok(self.start, end, end - self.start, self.sent - self.start, receive)
        worker.finished(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.busy:
            self.worker.tally.failed(self.start, _now(), f"connection closed: {exc or 'by the server'}")
        self.busy = False
        self.active = False
        self.worker.lost(self)
