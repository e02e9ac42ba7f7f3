"""What grpcio's servers cost a unary call before any of our code runs: the asyncio server a frontend
worker uses against grpcio's synchronous one.

A frontend worker's gRPC call (``worker_core.py``) spends most of its CPU in grpc.aio, not in our
Python: its poller thread hands every completion to the event loop.  grpcio's synchronous server polls
its completion queue from the threads that run the handlers.  Four bare servers answer ``ModelInfer``
with a prebuilt response, each pinned to core 1 under ``SCHED_BATCH`` (as ``naiad serve`` runs) with
grpc core's EventEngine experiments off (as ``naiad`` sets them), h2load on core 0 (16 connections):

- **aio**: ``grpc.aio`` on uvloop (the reference);
- **aio, round trip**: the same, each call first sending 8 bytes to another process (on core 0) and
  awaiting them back through the loop, as a worker's call waits for the engine (a loop turn's writes
  in one system call, as the worker's channel sends them);
- **sync, 4 threads** and **sync, 16 threads, round trip**: ``grpc.server`` with a thread pool, the
  round trip made from the handler's thread (a reader thread wakes it);
- **aio, N servers on the port**, with and without the round trip: as many ``grpc.aio`` servers sharing
  the port in the one process as Naiad's gRPC frontend runs (``naiad.frontends.grpc.server.LISTENERS``):
  a grpc.aio server admits one call per wake-up of the loop, several admit several.

Medians of ``--rounds``, interleaved.

usage: python benchmarks/scaling/grpc_floor.py [--rounds 2] [--calls 20000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from naiad.frontends.grpc.server import LISTENERS

from benchmarks.common.references import ROOT, free_port
from benchmarks.common.scratch import scratch
from benchmarks.grpc_infer.run import grpc_body
from benchmarks.scaling.run import add_sub_workload, h2load_calls, uptime

PYTHON = ROOT / ".venv" / "bin" / "python"
ENGINE_OFF = "GRPC_EXPERIMENTS=-event_engine_listener,-event_engine_for_all_other_endpoints"

#: The other process of a round trip: echoes what it reads, on core 0.
_ECHO = """
import os, socket, struct

def echo_process():
    a, b = socket.socketpair()
    if os.fork() == 0:
        os.sched_setaffinity(0, {0})
        a.close()
        while data := b.recv(65536):
            b.sendall(data)
        os._exit(0)
    b.close()
    return a
"""

AIO = textwrap.dedent(
    _ECHO
    + """
import asyncio, struct, sys
import grpc, uvloop
from tritonclient.grpc import service_pb2 as pb

ANSWER = pb.ModelInferResponse(model_name="add_sub", model_version="1").SerializeToString()
ROUND_TRIP = sys.argv[2] == "round-trip"
waiting = {}

class Echoed(asyncio.Protocol):
    # the round trip's end on the loop: a loop turn's writes in one system call, as a worker's channel

    def connection_made(self, transport):
        self.transport, self.buffer, self.queued = transport, b"", []

    def send(self, number):
        if not self.queued:
            asyncio.get_running_loop().call_soon(self.flush)
        self.queued.append(struct.pack("<Q", number))

    def flush(self):
        self.transport.write(b"".join(self.queued))
        self.queued = []

    def data_received(self, data):
        self.buffer += data
        while len(self.buffer) >= 8:
            (number,) = struct.unpack_from("<Q", self.buffer)
            self.buffer = self.buffer[8:]
            waiting.pop(number).set_result(None)

async def main():
    loop = asyncio.get_running_loop()
    count = 0
    if ROUND_TRIP:
        sock = echo_process()
        sock.setblocking(False)
        _, echoed = await loop.connect_accepted_socket(Echoed, sock)

    async def infer(request, context):
        nonlocal count
        if ROUND_TRIP:
            count += 1
            waiting[count] = future = loop.create_future()
            echoed.send(count)
            await future
        return ANSWER

    servers = []
    for _ in range(int(sys.argv[3])):  # on one port (grpc sets SO_REUSEPORT by default)
        server = grpc.aio.server()
        handlers = {"ModelInfer": grpc.unary_unary_rpc_method_handler(infer)}
        service = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", handlers)
        server.add_generic_rpc_handlers((service,))
        server.add_insecure_port(f"127.0.0.1:{sys.argv[1]}")
        await server.start()
        servers.append(server)
    print("ready", flush=True)
    await servers[0].wait_for_termination()

uvloop.run(main())
"""
)

SYNC = textwrap.dedent(
    _ECHO
    + """
import concurrent.futures, struct, sys, threading
import grpc
from tritonclient.grpc import service_pb2 as pb

ANSWER = pb.ModelInferResponse(model_name="add_sub", model_version="1").SerializeToString()
ROUND_TRIP = sys.argv[2] == "round-trip"
lock, waiting, count = threading.Lock(), {}, [0]

if ROUND_TRIP:
    sock = echo_process()

    def read():
        buffer = b""
        while True:
            buffer += sock.recv(65536)
            while len(buffer) >= 8:
                (number,) = struct.unpack_from("<Q", buffer)
                buffer = buffer[8:]
                waiting.pop(number).set()

    threading.Thread(target=read, daemon=True).start()

def infer(request, context):
    if ROUND_TRIP:
        done = threading.Event()
        with lock:
            count[0] += 1
            waiting[count[0]] = done
            sock.sendall(struct.pack("<Q", count[0]))
        done.wait()
    return ANSWER

server = grpc.server(concurrent.futures.ThreadPoolExecutor(int(sys.argv[3])))
handlers = {"ModelInfer": grpc.unary_unary_rpc_method_handler(infer)}
service = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", handlers)
server.add_generic_rpc_handlers((service,))
server.add_insecure_port(f"127.0.0.1:{sys.argv[1]}")
server.start()
print("ready", flush=True)
server.wait_for_termination()
"""
)

#: (label, server source, its arguments after the port).
SERVERS = [
    ("aio", AIO, ["plain", "1"]),
    ("aio, round trip", AIO, ["round-trip", "1"]),
    (f"aio, {LISTENERS} servers on the port", AIO, ["plain", str(LISTENERS)]),
    (f"aio, {LISTENERS} servers on the port, round trip", AIO, ["round-trip", str(LISTENERS)]),
    ("sync, 4 threads", SYNC, ["plain", "4"]),
    ("sync, 16 threads, round trip", SYNC, ["round-trip", "16"]),
]


def _calls_per_second(source: str, args: list[str], body: Path, calls: int) -> float:
    port = free_port()
    command = ["chrt", "-b", "0", "taskset", "-c", "1", "env", ENGINE_OFF, str(PYTHON), "-c", source]
    server = subprocess.Popen([*command, str(port), *args], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        h2load_calls(port, body, 2_000, "0")  # warm-up
        return h2load_calls(port, body, calls, "0")
    finally:
        server.terminate()
        server.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args(argv)

    print(f"uptime: {uptime()}", flush=True)
    body = grpc_body(add_sub_workload(1), scratch("grpc-floor-") / "add_sub.bin")
    rates: dict[str, list[float]] = {label: [] for label, _, _ in SERVERS}
    for _ in range(args.rounds):
        for label, source, server_args in SERVERS:
            rates[label].append(_calls_per_second(source, server_args, body, args.calls))
    reference = statistics.median(rates["aio"])
    print("| bare server on core 1 | calls/s | us per call | vs aio |")
    print("|---|---:|---:|---:|")
    for label, values in rates.items():
        rate = statistics.median(values)
        print(f"| {label} | {rate:,.0f} | {1e6 / rate:.0f} | {rate / reference:.2f}x |")
    print(f"uptime after: {uptime()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
