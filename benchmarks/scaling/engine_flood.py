"""The engine saturated: its CPU per request when frontend workers send more than it can serve.

``run.py`` (1) reads the engine's CPU under real load on this 2-core machine, where two frontend
workers and the load generator share the cores with the engine: the engine is never busy for long,
most of its wake-ups bring one or two requests, and each pays a wake-up of an idle CPU.  What bounds a
pod on a large node (#15: "so one engine can feed 50k requests/s") is the engine's cost when it is
the bottleneck.  This measures that, with the engine's real code on a real socket:

- the **engine**: this process, pinned to one CPU, built as ``naiad serve`` builds it (a
  :class:`~naiad.engine.link.WorkerLink` on a :class:`~naiad.ipc.channel.Channel` over one end of a
  socketpair, the data plane, the scheduler, the model, Python models in the engine);
- a **flood** process, pinned to the other CPU, that speaks the worker's side of the channel with the
  least work a worker can do: ``Infer`` frames encoded once (inputs written once into the request
  arena, the request checked against the published catalog as a worker checks it), kept ``--depth`` in
  flight, answers counted by frame.

Per request: the engine's CPU time (user + system of every thread of this process, ``getrusage``)
over a timed window, the answers per second, and the engine's busy share of its CPU (1.0 when
saturated).  Medians of ``--rounds``.  ``--model-processes`` runs the models in model processes
instead (Naiad's default); they inherit the engine's CPU, so the engine then shares its core with
them, unless ``--model-cpu flood`` moves them to the flood's CPU (as on a large node, where they
run on cores of their own; one instance then bounds the rate before the engine does).
``--instances N`` gives each model N instances (``instance_group`` count).  With Python models a third
workload returns a new 1x3x224x224 output (``x * 2``) rather than its input: a model process writes it
into the response arena itself, in the block the engine reserved (the request and response arenas are
lent to model processes as ``FrontendWorkers`` lends a worker's).  ``--backend onnxruntime``
serves the same two models as ONNX graphs (``Add``/``Sub``, ``Identity``) in ONNX Runtime, which runs
in the engine whatever the mode: the GPU node's own case (an ONNX, TensorRT or PyTorch model, with no
Python model code); the engine's CPU then includes ONNX Runtime's (the identity's copy of its 588 KiB
included), and the event loop's thread's share is shown apart.

usage: python benchmarks/scaling/engine_flood.py [--seconds 3] [--rounds 3] [--depth 64]
       [--model-processes [--model-cpu engine|flood]] [--instances 1] [--backend python|onnxruntime]
       [--only add_sub]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import signal
import socket
import statistics
import struct
import sys
import textwrap
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from naiad.backends.runtime import Runtime
from naiad.core.allocator import pin_thresholds
from naiad.core.request import InferRequest
from naiad.dataplane import DataPlane
from naiad.engine.link import PublishedSignatures, WorkerLink
from naiad.engine.workers import LASTING_SIZE
from naiad.ipc import arena, tensors
from naiad.ipc.arena import Arena, SharedArenas
from naiad.ipc.channel import connect
from naiad.ipc.messages import RESPONSE_ARENA, Answer, Infer, Release, ToEngine, ToWorker
from naiad.repository.manager import ModelRepository
from naiad.repository.registry import ModelRegistry

from benchmarks.common.scratch import scratch
from benchmarks.scaling.engine_path import ARENA_SIZE, _calls, _requests, run_between_uptimes
from benchmarks.scaling.run import IDENTITY_CONFIG, IDENTITY_PY, IN_ENGINE, repository

_LENGTH = struct.Struct("<I")

_ONNX_ADD_SUB = """\
platform: "onnxruntime_onnx"
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [{ kind: KIND_CPU }]
"""
_ONNX_IDENTITY = """\
platform: "onnxruntime_onnx"
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] }]
instance_group [{ kind: KIND_CPU }]
"""


def onnx_repository() -> Path:
    """``add_sub`` and ``identity_large`` as ONNX graphs (the workloads' names, shapes and answers)."""
    from onnx import TensorProto, helper

    from scripts.build_examples import make_model, save

    root = scratch("bench-scaling-onnx-")

    def tensor(name: str, shape: list[int]) -> object:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    add_sub = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "add_sub",
        [tensor("INPUT0", [4]), tensor("INPUT1", [4])],
        [tensor("OUTPUT0", [4]), tensor("OUTPUT1", [4])],
    )
    image = [1, 3, 224, 224]
    identity = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity_large",
        [tensor("INPUT0", image)],
        [tensor("OUTPUT0", image)],
    )
    for name, graph, config in (
        ("add_sub", add_sub, _ONNX_ADD_SUB),
        ("identity_large", identity, _ONNX_IDENTITY),
    ):
        save(make_model(graph), root / name / "1" / "model.onnx")
        (root / name / "config.pbtxt").write_text(config)
    return root


#: A Python model whose output is new memory (not its input's): ``x * 2``.
DOUBLE_PY = IDENTITY_PY.replace(".as_numpy())]", ".as_numpy() * 2)]")
DOUBLED = "doubled 1x3x224x224 FP32 (Python, a new output)"


def _workloads(backend: str) -> dict[str, InferRequest]:
    """The requests flooded, by label: ``engine_path``'s two, and for Python models a third whose
    output the model makes (the ONNX identity's already is)."""
    requests = _requests()
    if backend == "python":
        image = requests["identity 1x3x224x224 FP32"].inputs[0]
        requests[DOUBLED] = InferRequest("double_large", inputs=[image])
    return requests


def python_repository(in_engine: bool) -> Path:
    """``run.py``'s repository, and ``double_large`` (:data:`DOUBLE_PY`)."""
    root = repository(in_engine)
    assert "* 2" in DOUBLE_PY
    (root / "double_large" / "1").mkdir(parents=True)
    config = textwrap.dedent(IDENTITY_CONFIG) + (IN_ENGINE if in_engine else "")
    (root / "double_large" / "config.pbtxt").write_text(config)
    (root / "double_large" / "1" / "model.py").write_text(textwrap.dedent(DOUBLE_PY))
    return root


def _flood(sock: socket.socket, frames: list[bytes], depth: int, cpu: int, report: int) -> None:
    """The worker's side: once told to go (one byte), ``depth`` requests in flight, a new one sent
    for each answer, and the response-arena blocks of the answers released, as a worker releases
    them (in one write per read); the running count of answers is kept in ``report`` (a memfd) for
    the engine to read."""
    os.sched_setaffinity(0, {cpu})
    decoder = msgspec.msgpack.Decoder(ToWorker)
    encoder = msgspec.msgpack.Encoder()
    sock.recv(1)
    count = len(frames)
    sock.sendall(b"".join(frames[i % count] for i in range(depth)))
    sent = depth
    answered = 0
    buffer = bytearray()
    while True:
        buffer += sock.recv(1 << 20)
        start, end, frames_in = 0, len(buffer), 0
        released: list[int] = []
        while end - start >= 4:
            (length,) = _LENGTH.unpack_from(buffer, start)
            if end - start < 4 + length:
                break
            answer = decoder.decode(memoryview(buffer)[start + 4 : start + 4 + length])
            if isinstance(answer, Answer) and answer.response is not None:
                released += (ref.offset for ref in answer.response.outputs if ref.arena == RESPONSE_ARENA)
            start += 4 + length
            frames_in += 1
        del buffer[:start]
        answered += frames_in
        os.pwrite(report, struct.pack("<Q", answered), 0)
        out = [frames[(sent + i) % count] for i in range(frames_in)]
        if released:
            body = encoder.encode(Release(released))
            out.append(_LENGTH.pack(len(body)) + body)
        if out:
            sock.sendall(b"".join(out))
            sent += frames_in


class Flood:
    """One workload's flood process and the engine's end of its channel.  Forked before the engine
    starts any thread (a fork copies only the forking thread)."""

    def __init__(self, label: str, workloads: dict[str, InferRequest], depth: int, cpu: int) -> None:
        self.label = label
        self.request_fd = arena.create("flood-requests", ARENA_SIZE)
        self.response_fd = arena.create("flood-responses", ARENA_SIZE + LASTING_SIZE)
        message = tensors.request_message(
            workloads[label], Arena(self.request_fd, ARENA_SIZE, writable=True), []
        )
        message.validated = 1  # checked against catalog 1 (published below), as a worker checks it
        encoder = msgspec.msgpack.Encoder()
        frames = []
        for i in range(4096):  # ids cycle: never two in flight with one id (depth << 4096)
            body = encoder.encode(Infer(i, message))
            frames.append(_LENGTH.pack(len(body)) + body)
        self.sock, flood_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.report = os.memfd_create("flood-count")
        os.ftruncate(self.report, 8)
        self.pid = os.fork()
        if self.pid == 0:
            self.sock.close()
            try:
                _flood(flood_end, frames, depth, cpu, self.report)
            finally:
                os._exit(0)
        flood_end.close()

    def answered(self) -> int:
        return int(struct.unpack("<Q", os.pread(self.report, 8, 0))[0])

    async def measure(
        self, dataplane: DataPlane, lent: SharedArenas, seconds: float, rounds: int
    ) -> tuple[float, float, float, float]:
        """(engine CPU us per request, of it on the event loop's thread, requests/s, engine busy
        share): medians of ``rounds``.  Both arenas are lent to the model processes, as
        ``FrontendWorkers`` lends a worker's."""
        published = PublishedSignatures()
        published.update(1, dataplane.registry.models())
        requests = Arena(self.request_fd, ARENA_SIZE, writable=True)  # (as the engine maps it)
        responses = Arena(self.response_fd, ARENA_SIZE + LASTING_SIZE, writable=True, lasting=LASTING_SIZE)
        key = lent.add(requests, os.dup(self.request_fd))
        response_key = lent.add(responses, os.dup(self.response_fd), shared=True)
        link = WorkerLink(
            0,
            dataplane,
            requests,
            responses,
            _calls,
            lambda _: None,
            published,
            request_key=key,
            response_key=response_key,
        )
        self.sock.send(b"g")
        self.sock.setblocking(False)
        await connect(self.sock, ToEngine, link.on_message, link.on_lost, link.bind)
        rows = []
        await asyncio.sleep(1.0)  # warm-up
        for _ in range(rounds):
            usage, wall, count = resource.getrusage(resource.RUSAGE_SELF), time.monotonic(), self.answered()
            loop_cpu = time.thread_time()
            await asyncio.sleep(seconds)
            after, elapsed = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - wall
            loop_cpu = time.thread_time() - loop_cpu
            cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
            served = self.answered() - count
            rows.append((cpu / served * 1e6, loop_cpu / served * 1e6, served / elapsed, cpu / elapsed))
        self.close()
        lent.remove(key)
        lent.remove(response_key)
        assert link.channel is not None
        link.channel.close()
        medians = [statistics.median(row[i] for row in rows) for i in range(4)]
        return medians[0], medians[1], medians[2], medians[3]

    def close(self) -> None:
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = 0
            for fd in (self.report, self.request_fd, self.response_fd):
                os.close(fd)


def _instances(root: Path, count: int) -> None:
    """``count`` instances of each model in ``root`` (Triton's ``instance_group`` count)."""
    one = "instance_group [{ kind: KIND_CPU }]"
    for config in root.glob("*/config.pbtxt"):
        text = config.read_text()
        assert one in text, config
        config.write_text(text.replace(one, f"instance_group [{{ count: {count} kind: KIND_CPU }}]"))


def _move_descendants(cpu: int) -> None:
    """Every thread of every process this one started (the floods, the model processes' template,
    the model processes) onto ``cpu``."""
    pending = [os.getpid()]
    while pending:
        pid = pending.pop()
        for task in Path(f"/proc/{pid}/task").iterdir():  # (a child is listed by the thread that forked it)
            for child in map(int, (task / "children").read_text().split()):
                for thread in os.listdir(f"/proc/{child}/task"):
                    os.sched_setaffinity(int(thread), {cpu})
                pending.append(child)


async def _main(args: argparse.Namespace) -> None:
    flood_cpu, engine_cpu = (int(c) for c in args.cpus.split(","))
    os.sched_setaffinity(0, {engine_cpu})
    workloads = _workloads(args.backend)
    if args.only:
        workloads = {label: request for label, request in workloads.items() if label.startswith(args.only)}
    floods = [Flood(label, workloads, args.depth, flood_cpu) for label in workloads]
    pin_thresholds()  # as ``naiad serve`` does (see naiad.core.allocator)
    registry = ModelRegistry()
    runtime = Runtime()
    root = onnx_repository() if args.backend == "onnxruntime" else python_repository(not args.model_processes)
    _instances(root, args.instances)
    models = ModelRepository([root], registry=registry, runtime=runtime)
    dataplane = DataPlane(registry, models)
    runtime.in_flight = dataplane.in_flight  # as ``naiad serve`` wires it (see naiad.app)
    try:
        await models.start()
        dataplane.started = True
        gc.freeze()  # as ``naiad serve`` does once its models are loaded (see naiad.app)
        where = "the engine"
        if args.model_processes:
            where = f"model processes (on the {args.model_cpu}'s CPU)"
            if args.model_cpu == "flood":
                _move_descendants(flood_cpu)
        if args.backend == "onnxruntime":
            where = "the engine (ONNX Runtime)"
        else:
            where = f"Python models in {where}"
        print(f"in flight: {args.depth}; instances of each model: {args.instances}; {where}")
        print("| workload | engine CPU per request | of it on the event loop | requests/s | engine busy |")
        print("|---|---:|---:|---:|---:|")
        for flood in floods:
            cpu, loop_cpu, rate, busy = await flood.measure(
                dataplane, runtime.arenas, args.seconds, args.rounds
            )
            print(
                f"| {flood.label} | {cpu:.1f} us | {loop_cpu:.1f} us | {rate:,.0f} | {busy:.0%} |", flush=True
            )
    finally:
        for flood in floods:
            flood.close()
        await models.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--depth", type=int, default=64, help="requests the flood keeps in flight")
    parser.add_argument("--cpus", default="0,1", help="the flood's CPU, then the engine's")
    parser.add_argument(
        "--model-processes",
        action="store_true",
        help="run the models in model processes (Naiad's default), which share the engine's CPU",
    )
    parser.add_argument(
        "--model-cpu",
        choices=("engine", "flood"),
        default="engine",
        help="with --model-processes: the CPU the model processes run on",
    )
    parser.add_argument("--instances", type=int, default=1, help="instances of each model")
    parser.add_argument(
        "--backend",
        choices=("python", "onnxruntime"),
        default="python",
        help="the models' backend: Python (the reference add_sub), or the same two as ONNX graphs",
    )
    parser.add_argument("--only", default="", help="flood only the workloads whose label starts so")
    return run_between_uptimes(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
