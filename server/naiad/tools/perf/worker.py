"""One load-generating process: keeps N requests in flight (concurrency) or sends at a rate.

Each worker process is driven by the coordinator over a pipe (``("concurrency", n)``, ``("rate", r)``,
``("collect",)``, ``("stop",)``) and answers ``collect`` with every request finished since the last one:
an int64 array of ``(start, end, latency, send, receive, ok, responses)`` rows, times from
``CLOCK_MONOTONIC`` (shared by all processes, so the coordinator can cut windows by end time).

HTTP runs on a bare asyncio protocol (uvloop where present) over keep-alive connections, one per
in-flight request, writing prebuilt request bytes and reading just enough of the answer to check it.
gRPC uses grpcio's synchronous channels with completion callbacks, raw bytes in and out; decoupled
models stream over ``ModelStreamInfer``, one stream per slot.  Every answer is checked (status and the
presence of every output) and a failure is counted apart, never as throughput.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import queue
import threading
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol

import grpc
import numpy as np
import orjson
from tritonclient.grpc import service_pb2 as pb

from naiad.tools.perf.inputs import Step
from naiad.tools.perf.payloads import PayloadBuilder, WireFormat
from naiad.tools.perf.sources import Requests, SequencePlan, Source

Record = tuple[int, int, int, int, int, int, int]
_now = time.monotonic_ns
_MAX_ERRORS = 20
_INFER = "/inference.GRPCInferenceService/ModelInfer"
_STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"


@dataclass(frozen=True)
class WorkerPlan:
    wire: WireFormat
    host: str
    port: int
    steps: list[Step]
    streams: list[list[int]]
    sequence: SequencePlan | None
    worker: int
    workers: int
    grpc_channels: int = 4
    raw_grpc: bool = False  # unary gRPC over naiad.tools.perf.h2 instead of grpcio


class Tally:
    """Finished requests and error messages since the last collect (appends are atomic under the GIL)."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.errors: dict[str, int] = {}
        self.cpu = time.process_time()

    def ok(self, start: int, end: int, latency: int, send: int, receive: int, responses: int = 1) -> None:
        self.records.append((start, end, latency, send, receive, 1, responses))

    def failed(self, start: int, end: int, message: str) -> None:
        self.records.append((start, end, end - start, 0, 0, 0, 0))
        if message in self.errors or len(self.errors) < _MAX_ERRORS:
            self.errors[message] = self.errors.get(message, 0) + 1

    def take(self) -> tuple[np.ndarray, dict[str, int], float]:
        """Records, error counts and this process's CPU seconds (all threads) since the last take."""
        records, self.records = self.records, []
        errors, self.errors = self.errors, {}
        cpu, self.cpu = self.cpu, time.process_time()
        return np.array(records, dtype=np.int64).reshape(-1, 7), errors, self.cpu - cpu


def _missing(names: list[str], expected: tuple[str, ...]) -> str:
    for name in expected:
        if name not in names:
            return f"response has no output '{name}'"
    return ""


# ---- HTTP ----------------------------------------------------------------------------------------------


def _header_int(head: bytes, name: bytes) -> int:
    at = head.find(name)
    if at < 0:
        return -1
    at += len(name)
    end = head.find(b"\r\n", at)
    return int(head[at : end if end >= 0 else len(head)])


class Slot(Protocol):
    """What :class:`HttpWorker` needs of a connection: HTTP/1.1 (:class:`HttpSlot`) or gRPC over HTTP/2."""

    source: Source
    transport: asyncio.Transport | None
    busy: bool
    active: bool

    def send(self) -> None: ...


class HttpSlot(asyncio.Protocol):
    """One keep-alive connection with at most one request in flight."""

    def __init__(self, worker: HttpWorker, source: Source) -> None:
        self.worker = worker
        self.source = source
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.head_end = -1
        self.body_length = 0
        self.status = 0
        self.json_length = -1
        self.start = self.sent = 0
        self.busy = False
        self.active = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.worker.connected(self)

    def send(self) -> None:
        assert self.transport is not None
        payload = self.source.next()
        self.busy = True
        self.start = _now()
        self.transport.write(payload)
        self.sent = _now()

    def data_received(self, data: bytes) -> None:
        try:
            self._parse(data)
        except ValueError:  # not HTTP/1.1 as we know it: fail the request and drop the connection
            self.worker.tally.failed(self.start, _now(), "malformed HTTP response")
            self.busy = False
            if self.transport is not None:
                self.transport.close()

    def _parse(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while True:
            if self.head_end < 0:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(buffer[:end]).lower()
                self.status = int(head[9:12])
                self.body_length = max(0, _header_int(head, b"\r\ncontent-length:"))
                self.json_length = _header_int(head, b"\r\ninference-header-content-length:")
                self.head_end = end + 4
            total = self.head_end + self.body_length
            if len(buffer) < total:
                return
            arrived = _now()
            body = bytes(buffer[self.head_end : total])
            del buffer[:total]
            self.head_end = -1
            self._answer(body, arrived)

    def _answer(self, body: bytes, arrived: int) -> None:
        worker = self.worker
        self.busy = False
        if self.status != 200:
            try:
                message = str(orjson.loads(body).get("error", body[:200]))
            except (orjson.JSONDecodeError, AttributeError):
                message = body[:200].decode(errors="replace")
            worker.tally.failed(self.start, _now(), f"HTTP {self.status}: {message}")
        else:
            try:
                document = orjson.loads(body[: self.json_length] if self.json_length >= 0 else body)
                names = [output["name"] for output in document.get("outputs", ())]
                problem = _missing(names, worker.expected)
            except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
                problem = "response is not a KServe v2 inference response"
            end = _now()
            if problem:
                worker.tally.failed(self.start, end, problem)
            else:
                worker.tally.ok(self.start, end, end - self.start, self.sent - self.start, end - arrived)
        worker.finished(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.busy:
            self.worker.tally.failed(self.start, _now(), f"connection closed: {exc or 'by the server'}")
        self.busy = False
        self.active = False
        self.worker.lost(self)


class HttpWorker:
    """Slots of :class:`HttpSlot`: a fixed set for concurrency, an idle pool for a request rate."""

    def __init__(
        self, plan: WorkerPlan, requests: Requests, loop: asyncio.AbstractEventLoop,
        slot: Callable[[HttpWorker, Source], Slot] | None = None,
    ) -> None:
        self.slot: Callable[[HttpWorker, Source], Slot] = slot or HttpSlot
        self.h2_headers = b""
        if plan.raw_grpc:
            from naiad.tools.perf.h2 import request_headers

            self.h2_headers = request_headers(plan.wire.host, _INFER)
        self.plan = plan
        self.requests = requests
        self.loop = loop
        self.expected = plan.wire.outputs
        self.tally = Tally()
        self.slots: set[Slot] = set()
        self.idle: list[Slot] = []
        self.closed_loop = True
        self.interval_ns = 0
        self.next_send = 0
        self.backlog = 0
        self.timer: asyncio.TimerHandle | None = None

    def _open(self) -> None:
        slot = self.slot(self, self.requests.source())
        self.slots.add(slot)
        protocol = typing.cast(asyncio.Protocol, slot)
        connecting = self.loop.create_connection(lambda: protocol, self.plan.host, self.plan.port)
        task = self.loop.create_task(connecting)
        task.add_done_callback(functools.partial(self._opened, slot=slot))

    def _opened(self, task: asyncio.Task[Any], *, slot: Slot) -> None:
        if task.cancelled() or task.exception() is not None:
            error = "cancelled" if task.cancelled() else task.exception()
            self.slots.discard(slot)
            now = _now()
            self.tally.failed(now, now, f"cannot connect: {error}")
            if self.closed_loop and slot.active:
                self.loop.call_later(0.1, self._open)

    def connected(self, slot: Slot) -> None:
        if not slot.active:
            self._retire(slot)
        elif self.closed_loop:
            slot.send()
        else:
            self._idle(slot)

    def finished(self, slot: Slot) -> None:
        if not slot.active and slot.source.unfinished():
            slot.source.end_next()  # a sequence left open would hold its correlation ID on the server
            slot.send()
        elif not slot.active:
            self._retire(slot)
        elif self.closed_loop:
            slot.send()
        else:
            self._idle(slot)

    def _idle(self, slot: Slot) -> None:
        if self.backlog > 0:
            self.backlog -= 1
            slot.send()
        else:
            self.idle.append(slot)

    def _retire(self, slot: Slot) -> None:
        self.slots.discard(slot)
        if slot.transport is not None:
            slot.transport.close()

    def lost(self, slot: Slot) -> None:
        self.slots.discard(slot)
        with contextlib.suppress(ValueError):
            self.idle.remove(slot)

    def _stop_all(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.backlog = 0
        for slot in list(self.slots):
            slot.active = False
            if not slot.busy:
                self._retire(slot)
        self.idle.clear()

    def concurrency(self, count: int) -> None:
        self._stop_all()
        self.closed_loop = True
        for _ in range(count):
            self._open()

    def rate(self, per_second: float) -> None:
        self._stop_all()
        self.closed_loop = False
        if per_second <= 0:
            return
        self.interval_ns = int(1e9 / per_second)
        self.next_send = _now()
        self._tick()

    def _tick(self) -> None:
        now = _now()
        while self.next_send <= now:
            self.next_send += self.interval_ns
            if self.idle:
                self.idle.pop().send()
            else:
                self.backlog += 1
                self._open()
        self.timer = self.loop.call_at(self.loop.time() + (self.next_send - now) / 1e9, self._tick)

    def stop(self) -> None:
        self._stop_all()


def _run_http(plan: WorkerPlan, requests: Requests, conn: Connection) -> None:
    """The event loop sends and receives; a thread takes the coordinator's commands (the pipe stays
    blocking: an event-loop reader would make it non-blocking, and a large ``collect`` answer would fail)."""
    try:
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        loop = asyncio.new_event_loop()
    slot: Callable[[HttpWorker, Source], Slot] | None = None
    if plan.raw_grpc:
        from naiad.tools.perf.h2 import GrpcH2Slot

        slot = GrpcH2Slot
    worker = HttpWorker(plan, requests, loop, slot)
    done = loop.create_future()

    deadline = [0.0]

    def drained() -> None:
        """Done once no request is in flight (open sequences get their END), or after five seconds."""
        if any(slot.busy for slot in worker.slots) and loop.time() < deadline[0]:
            loop.call_later(0.01, drained)
        elif not done.done():
            done.set_result(None)

    def finish() -> None:
        worker.stop()
        deadline[0] = loop.time() + 5
        drained()

    def commands() -> None:
        while True:
            try:
                message = conn.recv()
            except EOFError:
                message = ("stop",)
            if message[0] == "collect":
                conn.send((*worker.tally.take(), requests.take_sequences()))
            elif message[0] == "concurrency":
                loop.call_soon_threadsafe(worker.concurrency, int(message[1]))
            elif message[0] == "rate":
                loop.call_soon_threadsafe(worker.rate, float(message[1]))
            else:
                loop.call_soon_threadsafe(finish)
                return

    reader = threading.Thread(target=commands, daemon=True)
    reader.start()
    loop.run_until_complete(done)
    loop.close()


def _dispatch(
    message: tuple[Any, ...],
    conn: Connection,
    tally: Tally,
    requests: Requests,
    concurrency: Callable[[int], None],
    rate: Callable[[float], None],
) -> bool:
    """Run one coordinator command; False on ``stop``."""
    kind = message[0]
    if kind == "collect":
        conn.send((*tally.take(), requests.take_sequences()))
    elif kind == "concurrency":
        concurrency(int(message[1]))
    elif kind == "rate":
        rate(float(message[1]))
    elif kind == "stop":
        return False
    return True


# ---- gRPC ----------------------------------------------------------------------------------------------


class GrpcWorker:
    """Unary calls chained from completion callbacks; streams (decoupled models) on a thread per slot."""

    def __init__(self, plan: WorkerPlan, requests: Requests) -> None:
        self.plan = plan
        self.requests = requests
        self.expected = plan.wire.outputs
        self.tally = Tally()
        target = f"{plan.host}:{plan.port}"
        options = [
            ("grpc.use_local_subchannel_pool", 1),
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", -1),
        ]
        self.channels = [grpc.insecure_channel(target, options=options) for _ in range(plan.grpc_channels)]
        for channel in self.channels:  # connected before the first window opens
            try:
                grpc.channel_ready_future(channel).result(timeout=30)
            except grpc.FutureTimeoutError:
                break  # the calls will fail and be counted as errors
        self.unary = [
            c.unary_unary(_INFER, request_serializer=None, response_deserializer=None) for c in self.channels
        ]
        self.stream = [
            c.stream_stream(_STREAM, request_serializer=None, response_deserializer=None)
            for c in self.channels
        ]
        self.generation = 0
        self.open_calls = 0
        self.lock = threading.Lock()
        self.ticker: threading.Thread | None = None

    # closed loop
    def concurrency(self, count: int) -> None:
        with self.lock:
            self.generation += 1
            generation = self.generation
        for index in range(count):
            source = self.requests.source()
            if self.plan.wire.streaming:
                threading.Thread(
                    target=self._stream_slot, args=(index, source, generation), daemon=True
                ).start()
            else:
                self._call(index, source, generation, chain=True)

    def _call(self, index: int, source: Source, generation: int, chain: bool) -> None:
        payload = source.next()
        start = _now()
        self.open_calls += 1
        future = self.unary[index % len(self.unary)].future(payload)
        sent = _now()

        def done(f: grpc.Future) -> None:
            arrived = _now()
            self.open_calls -= 1
            try:
                raw = f.result()
            except grpc.RpcError as error:
                self.tally.failed(start, _now(), f"{error.code().name}: {error.details()}")
            else:
                response = pb.ModelInferResponse.FromString(raw)
                problem = _missing([o.name for o in response.outputs], self.expected)
                end = _now()
                if problem:
                    self.tally.failed(start, end, problem)
                else:
                    self.tally.ok(start, end, end - start, sent - start, end - arrived)
            if chain and generation == self.generation:
                self._call(index, source, generation, chain)
            elif source.unfinished():  # end the sequence: the server would hold its correlation ID
                source.end_next()
                self._call(index, source, generation, chain=False)

        future.add_done_callback(done)

    def _stream_slot(self, index: int, source: Source, generation: int) -> None:
        outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        answers = self.stream[index % len(self.stream)](iter(outbox.get, None))
        try:
            while generation == self.generation:
                payload = source.next()
                start = _now()
                outbox.put(payload)
                sent = _now()
                first, count, problem = 0, 0, ""
                for raw in answers:
                    message = pb.ModelStreamInferResponse.FromString(raw)
                    if message.error_message:
                        problem = message.error_message
                        break
                    response = message.infer_response
                    if response.outputs:
                        count += 1
                        first = first or _now()
                        problem = problem or _missing([o.name for o in response.outputs], self.expected)
                    if response.parameters["triton_final_response"].bool_param:
                        break
                end = _now()
                if problem:
                    self.tally.failed(start, end, problem)
                else:
                    self.tally.ok(start, end, (first or end) - start, sent - start, 0, count)
        except grpc.RpcError as error:
            self.tally.failed(_now(), _now(), f"{error.code().name}: {error.details()}")
        finally:
            outbox.put(None)
            answers.cancel()

    # open loop
    def rate(self, per_second: float) -> None:
        with self.lock:
            self.generation += 1
            generation = self.generation
        if per_second <= 0:
            return
        self.ticker = threading.Thread(target=self._tick, args=(per_second, generation), daemon=True)
        self.ticker.start()

    def _tick(self, per_second: float, generation: int) -> None:
        interval = int(1e9 / per_second)
        due = _now()
        sources = [self.requests.source() for _ in range(len(self.unary))]
        count = 0
        while generation == self.generation:
            now = _now()
            if due > now:
                time.sleep((due - now) / 1e9)
                continue
            self._call(count, sources[count % len(sources)], generation, chain=False)
            count += 1
            due += interval

    def stop(self) -> None:
        with self.lock:
            self.generation += 1
        deadline = time.monotonic() + 5
        while self.open_calls and time.monotonic() < deadline:  # sequences being ended
            time.sleep(0.01)
        for channel in self.channels:
            channel.close()


def _run_grpc(plan: WorkerPlan, requests: Requests, conn: Connection) -> None:
    worker = GrpcWorker(plan, requests)
    conn.send(("ready",))
    try:
        while True:
            try:
                message = conn.recv()
            except EOFError:
                break
            if not _dispatch(message, conn, worker.tally, requests, worker.concurrency, worker.rate):
                break
    finally:
        worker.stop()


def worker_main(plan: WorkerPlan, conn: Connection) -> None:
    """Entry point of a worker process."""
    builder = PayloadBuilder(plan.wire, plan.steps)
    requests = Requests(builder, plan.streams, plan.sequence, plan.worker, plan.workers)
    if plan.wire.protocol == "grpc" and not plan.raw_grpc:
        _run_grpc(plan, requests, conn)
    else:
        conn.send(("ready",))
        _run_http(plan, requests, conn)
