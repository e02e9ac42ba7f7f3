"""Everything one profiling run holds open: the control client, shared-memory regions and the workers."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from types import TracebackType

from naiad.tools.perf.control import Control, ControlError, connect
from naiad.tools.perf.engine import LoadGenerator, MeasureSettings, Profiler
from naiad.tools.perf.inputs import DataOptions, InputDataError, Step, build_streams
from naiad.tools.perf.model import ModelInfo, read_model
from naiad.tools.perf.payloads import PayloadBuilder, SharedMemoryLayout, WireFormat
from naiad.tools.perf.sources import SequencePlan
from naiad.tools.perf.worker import WorkerPlan

_ITEM_SIZE = {
    "BOOL": 1,
    "UINT8": 1,
    "INT8": 1,
    "UINT16": 2,
    "INT16": 2,
    "FP16": 2,
    "BF16": 2,
    "UINT32": 4,
    "INT32": 4,
    "FP32": 4,
    "UINT64": 8,
    "INT64": 8,
    "FP64": 8,
}


class SetupError(Exception):
    """The run cannot start (bad flags for this model, unreachable server); the message says why."""


@dataclass(frozen=True)
class Target:
    """Where the server is and what is measured there."""

    url: str
    protocol: str
    model: str
    version: str = ""


@dataclass(frozen=True)
class LoadOptions:
    batch: int = 1
    data: str = "random"
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    string_length: int = 128
    string_data: str | None = None
    shared_memory: str = "none"
    output_shared_memory_size: int = 102400
    binary_inputs: bool = True
    binary_outputs: bool = True
    streaming: bool = False
    sequence_length: int | None = None
    sequence_length_variation: float = 20.0
    sequence_id_range: tuple[int, int] = (1, 2**31)
    workers: int | None = None
    grpc_client: str = "auto"  # "grpcio" forces grpcio for unary calls


def split_url(url: str, protocol: str) -> tuple[str, int]:
    text = url.split("://", 1)[-1].rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, 8001 if protocol == "grpc" else 8000
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise SetupError(f"-u {url}: expected host:port") from None


def default_workers(load: int) -> int:
    """One process per core this process may run on (at most 4), never more than the requests in flight."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, load, 4))


class Session:
    """``with Session(target, options, settings, max_load) as s: s.profiler.concurrency(4)``."""

    def __init__(
        self, target: Target, options: LoadOptions, settings: MeasureSettings, max_load: int
    ) -> None:
        self.target, self.options, self.settings = target, options, settings
        self.workers = options.workers or default_workers(max_load)
        self.control: Control | None = None
        self.regions: list[tuple[str, shared_memory.SharedMemory]] = []
        self.generator: LoadGenerator | None = None
        self.info: ModelInfo | None = None

    def __enter__(self) -> Session:
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def _open(self) -> None:
        target, options = self.target, self.options
        if options.streaming and target.protocol != "grpc":
            raise SetupError("Streaming is only allowed with gRPC protocol.")
        host, port = split_url(target.url, target.protocol)
        self.control = connect(target.protocol, f"{host}:{port}")
        try:
            info = read_model(self.control, target.model, target.version)
        except ControlError as error:
            raise SetupError(f"cannot read model '{target.model}': {error}") from None
        self.info = info
        if info.decoupled and not options.streaming:
            raise SetupError(f"model '{info.name}' is decoupled: measure it with -i grpc --streaming")
        data = DataOptions(
            options.data, options.batch, options.shapes, options.string_length, options.string_data
        )
        try:
            streams = build_streams(info, data)
        except InputDataError as error:
            raise SetupError(str(error)) from None
        steps = [step for stream in streams for step in stream]
        indexes, at = [], 0
        for stream in streams:
            indexes.append(list(range(at, at + len(stream))))
            at += len(stream)
        layout = self._shared_memory(steps, info) if options.shared_memory == "system" else None
        wire = WireFormat(
            protocol=target.protocol,
            host=f"{host}:{port}",
            model=info.name,
            version=target.version,
            outputs=tuple(o.name for o in info.outputs),
            binary_inputs=options.binary_inputs,
            binary_outputs=options.binary_outputs,
            streaming=options.streaming,
            shared_memory=layout,
        )
        sequence = None
        if info.sequence:
            length = options.sequence_length
            if length is None and options.data in ("random", "zero"):
                length = 20
            sequence = SequencePlan(length, options.sequence_length_variation, *options.sequence_id_range)
        raw = self._raw_grpc(wire, steps, sequence)
        plans = [
            WorkerPlan(wire, host, port, steps, indexes, sequence, index, self.workers, raw_grpc=raw)
            for index in range(self.workers)
        ]
        self.generator = LoadGenerator(plans)
        self.profiler = Profiler(self.generator, self.control, info.name, target.version, self.settings)

    def _raw_grpc(self, wire: WireFormat, steps: list[Step], sequence: SequencePlan | None) -> bool:
        """Unary gRPC over the bare HTTP/2 client where ``hpack`` is installed and requests fit a frame."""
        if wire.protocol != "grpc" or wire.streaming or self.options.grpc_client == "grpcio":
            return False
        try:
            from naiad.tools.perf.h2 import fits
        except ImportError:
            return False
        builder = PayloadBuilder(wire, steps)
        flags = (2**63 - 1, True, True) if sequence is not None else None
        return all(fits(builder.build(index, flags)) for index in range(len(steps)))

    def _shared_memory(self, steps: list[Step], info: ModelInfo) -> SharedMemoryLayout:
        """One region with every step's inputs, one for the outputs; registered with the server."""
        assert self.control is not None
        inputs: dict[tuple[int, str], tuple[int, int]] = {}
        offset = 0
        for index, step in enumerate(steps):
            for tensor in step:
                inputs[(index, tensor.name)] = (offset, len(tensor.raw))
                offset += len(tensor.raw)
        input_region = self._region("input", offset)
        for index, step in enumerate(steps):
            for tensor in step:
                start, size = inputs[(index, tensor.name)]
                buffer = input_region[1].buf
                assert buffer is not None
                buffer[start : start + size] = tensor.raw
        outputs: dict[str, tuple[int, int]] = {}
        at = 0
        for spec in info.outputs:
            shape = ((self.options.batch,) if info.max_batch_size else ()) + spec.shape
            if spec.datatype == "BYTES" or any(d < 0 for d in shape):
                size = self.options.output_shared_memory_size
            else:
                size = math.prod(shape) * _ITEM_SIZE[spec.datatype]
            outputs[spec.name] = (at, size)
            at += size
        output_region = self._region("output", at)
        return SharedMemoryLayout(input_region[0], inputs, output_region[0], outputs)

    def _region(self, role: str, size: int) -> tuple[str, shared_memory.SharedMemory]:
        assert self.control is not None
        name = f"naiad_perf_{os.getpid()}_{role}"
        memory = shared_memory.SharedMemory(name=name, create=True, size=max(1, size))
        self.regions.append((name, memory))
        try:
            self.control.register_system_shm(name, f"/{name}", max(1, size))
        except ControlError as error:
            raise SetupError(f"cannot register shared memory region {name}: {error}") from None
        return name, memory

    def close(self) -> None:
        if self.generator is not None:
            self.generator.close()
            self.generator = None
        for name, memory in self.regions:
            if self.control is not None:
                try:
                    self.control.unregister_system_shm(name)
                except ControlError:
                    pass
            memory.close()
            memory.unlink()
        self.regions = []
        if self.control is not None:
            self.control.close()
            self.control = None

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
