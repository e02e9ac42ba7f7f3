"""Large tensors cross between the engine and a model process without the engine copying them.

A frontend worker's request arena is lent to the model processes (read-only), so an input written
there by the worker is read by the model where it lies; an output the model returns from its inputs
comes back by reference too; and the engine reads the other outputs where the model process placed
them, giving that output region to no other execution while anything reads it.  Checked on the
server (both modes: with workers the model sees its input in the worker's memfd, in one process in
a region of its own) and under concurrency, where a region given to the next execution too early
would hand one client another's answer.  As in Triton, a model may change its inputs in place (the
arena is mapped copy-on-write, and what the model wrote is dropped after its execution): the
answers carry its changes, and later requests over the same memory never see them.
"""

from __future__ import annotations

import concurrent.futures
import mmap
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from naiad.backends.python import process, shm
from naiad.core.request import Tensor

from tests.engine.test_workers import workers
from tests.scheduling.models import wait_for
from tests.support import modes
from tests.support.models import write_model
from tests.support.server import ServerProcess

frontend_workers = modes.frontend_workers

#: A 1x3x224x224 FP32 image: 602 KB, far past the size below which tensors are copied as bytes.
SHAPE = (1, 3, 224, 224)

#: Returns its input (OUTPUT0), twice its input (OUTPUT1), the name of the mapping its input lies in
#: and how many frontend workers' request arenas its process maps (by inode: a restarted worker's new
#: arena has the old one's name).
WHERE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


def mapping(address):
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            low, high = (int(part, 16) for part in fields[0].split("-"))
            if low <= address < high:
                return fields[5].strip() if len(fields) > 5 else "[anonymous]"
    return "?"


def arenas():
    with open("/proc/self/maps") as maps:
        return len({line.split()[4] for line in maps if "naiad-requests" in line})


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            # (through DLPack: the tensor's memory as it is; ``as_numpy`` copies a read-only one)
            where = mapping(np.from_dlpack(tensor).__array_interface__["data"][0])
            image = tensor.as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", image),
                pb_utils.Tensor("OUTPUT1", image * 2),
                pb_utils.Tensor("MAPPING", np.array([where.encode()], dtype=np.object_)),
                pb_utils.Tensor("ARENAS", np.array([arenas()], dtype=np.int32)),
            ]))
        return responses
"""

WHERE_CONFIG = """
name: "where"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] },
  { name: "MAPPING" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "ARENAS" data_type: TYPE_INT32 dims: [ 1 ] }
]
"""


#: ``OUT = IN * FACTOR + TERM`` for a batch of images.
AFFINE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json
        parameters = json.loads(args["model_config"])["parameters"]
        self.factor = float(parameters["FACTOR"]["string_value"])
        self.term = float(parameters["TERM"]["string_value"])

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * self.factor + self.term)])
            for r in requests]
"""


def _affine_config(name: str, factor: int, term: int, batching: str = "") -> str:
    return f"""
    name: "{name}"
    backend: "python"
    max_batch_size: 8
    input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]
    output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]
    parameters [ {{ key: "FACTOR" value: {{ string_value: "{factor}" }} }},
                 {{ key: "TERM" value: {{ string_value: "{term}" }} }} ]
    {batching}
    """


#: ``twice`` answers at once; its outputs then wait 20 ms in ``plus_one``'s queue, read where
#: ``twice``'s model process put them, while ``twice`` runs the other clients' executions.
CHAIN_CONFIG = """
name: "chain"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "RESULT" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
ensemble_scheduling { step [
  { model_name: "twice" model_version: -1
    input_map { key: "IN" value: "IMAGE" } output_map { key: "OUT" value: "doubled" } },
  { model_name: "plus_one" model_version: -1
    input_map { key: "IN" value: "doubled" } output_map { key: "OUT" value: "RESULT" } }
] }
"""


#: Adds 1 to its input in place and returns it, as Triton's models may.
IN_PLACE_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            image += 1
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", image)]))
        return responses
"""


#: What Triton 2.51 answers (checked side by side): the input is writable, and ``x += 1`` works.
WRITABLE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            writable = bool(x.flags.writeable)
            x += 1
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("WRITABLE", np.array([writable]))]))
        return responses
"""


def _writable_config(name: str, extra: str = "") -> str:
    return f"""
    name: "{name}"
    backend: "python"
    max_batch_size: 0
    input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
    output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }},
             {{ name: "WRITABLE" data_type: TYPE_BOOL dims: [ 1 ] }} ]
    {extra}
    """


IN_THE_ENGINE = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }'

#: ``bump`` adds 1 to IMAGE in place; ``keep`` runs after it (it also takes ``bump``'s output) and
#: returns IMAGE as it got it.  Both in the engine, where steps share the ensemble's tensors.
FAN_OUT_CONFIG = """
name: "fan_out"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IMAGE" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "BUMPED" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "KEPT" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "bump" model_version: -1
    input_map { key: "INPUT0" value: "IMAGE" } output_map { key: "OUTPUT0" value: "BUMPED" } },
  { model_name: "keep" model_version: -1
    input_map { key: "INPUT0" value: "IMAGE" } input_map { key: "AFTER" value: "BUMPED" }
    output_map { key: "OUTPUT0" value: "KEPT" } }
] }
"""

KEEP_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_workers: int) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("zero_copy")
    write_model(repo, "where", WHERE_CONFIG, WHERE_PY)
    write_model(repo, "twice", _affine_config("twice", 2, 0), AFFINE_PY)
    delay = "dynamic_batching { max_queue_delay_microseconds: 20000 }"
    write_model(repo, "plus_one", _affine_config("plus_one", 1, 1, delay), AFFINE_PY)
    write_model(repo, "chain", CHAIN_CONFIG)
    write_model(repo, "writable", _writable_config("writable"), WRITABLE_PY)
    write_model(repo, "bump", _writable_config("bump", IN_THE_ENGINE), WRITABLE_PY)
    keep = _writable_config("keep", IN_THE_ENGINE).replace(
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]',
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }, '
        '{ name: "AFTER" data_type: TYPE_FP32 dims: [ -1 ] } ]',
    )
    write_model(repo, "keep", keep, KEEP_PY)
    write_model(repo, "fan_out", FAN_OUT_CONFIG)
    write_model(
        repo, "writable_in_engine", _writable_config("writable_in_engine", IN_THE_ENGINE), WRITABLE_PY
    )
    in_place = _affine_config("in_place", 1, 0).replace("max_batch_size: 8", "max_batch_size: 0")
    write_model(
        repo, "in_place", in_place.replace("dims: [ 3, 224, 224 ]", "dims: [ 1, 3, 224, 224 ]"), IN_PLACE_PY
    )
    with ServerProcess([repo], frontend_workers=frontend_workers) as served:
        yield served


NAMES = ("OUTPUT0", "OUTPUT1", "MAPPING", "ARENAS")


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(SHAPE, dtype=np.float32)


def _http(server: ServerProcess, image: np.ndarray) -> dict[str, np.ndarray]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        tensor = httpclient.InferInput("INPUT0", list(SHAPE), "FP32")
        tensor.set_data_from_numpy(image, binary_data=True)
        outputs = [httpclient.InferRequestedOutput(name, binary_data=True) for name in NAMES]
        result = client.infer("where", [tensor], outputs=outputs)
        return {name: result.as_numpy(name) for name in NAMES}
    finally:
        client.close()


def _grpc(server: ServerProcess, image: np.ndarray) -> dict[str, np.ndarray]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        tensor = grpcclient.InferInput("INPUT0", list(SHAPE), "FP32")
        tensor.set_data_from_numpy(image)
        result = client.infer("where", [tensor])
        return {name: result.as_numpy(name) for name in NAMES}
    finally:
        client.close()


def test_the_model_reads_its_input_where_the_frontend_put_it(server: ServerProcess) -> None:
    image = _image(0)
    for call in (_http, _grpc):
        answer = call(server, image)
        np.testing.assert_array_equal(answer["OUTPUT0"], image)
        np.testing.assert_array_equal(answer["OUTPUT1"], image * 2)
        mapping = answer["MAPPING"][0].decode()
        if server.frontend_workers:
            # the worker's request arena, mapped by the model process: the engine copied nothing
            assert mapping.startswith("/memfd:naiad-requests-"), mapping
            assert 1 <= answer["ARENAS"][0] <= server.frontend_workers
        else:
            # the request is in the engine's memory: copied once into the model's input region
            assert mapping.startswith("/dev/shm/naiad-"), mapping


@pytest.mark.parametrize("model", ["writable", "writable_in_engine"])
def test_inputs_are_writable_as_in_triton_whatever_the_wire(server: ServerProcess, model: str) -> None:
    """Triton 2.51 hands a Python model writable inputs (``x += 1`` on ``as_numpy()`` works): over
    JSON, binary HTTP and gRPC, in a model process and in the engine, Naiad does too."""
    values = np.array([1, 2, 3], np.float32)
    with httpclient.InferenceServerClient(server.http_url) as client:
        for binary in (False, True):
            tensor = httpclient.InferInput("INPUT0", [3], "FP32")
            tensor.set_data_from_numpy(values, binary_data=binary)
            result = client.infer(model, [tensor])
            assert result.as_numpy("OUTPUT0").tolist() == [2, 3, 4]
            assert result.as_numpy("WRITABLE").tolist() == [True]
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        tensor = grpcclient.InferInput("INPUT0", [3], "FP32")
        tensor.set_data_from_numpy(values)
        result = client.infer(model, [tensor])
        assert result.as_numpy("OUTPUT0").tolist() == [2, 3, 4]
        assert result.as_numpy("WRITABLE").tolist() == [True]
    finally:
        client.close()


def test_a_step_that_changes_its_input_in_place_changes_no_other_step(server: ServerProcess) -> None:
    """In Triton each step's Python model works on inputs of its own: ``bump``'s ``x += 1`` on the
    ensemble's IMAGE must not reach ``keep``, which reads IMAGE after it (a 400-KB image, so that with
    workers it lies in the worker's arena, and JSON, where it is a writable array)."""
    image = np.arange(100_000, dtype=np.float32)
    with httpclient.InferenceServerClient(server.http_url) as client:
        for binary in (True, False):
            tensor = httpclient.InferInput("IMAGE", list(image.shape), "FP32")
            tensor.set_data_from_numpy(image, binary_data=binary)
            result = client.infer("fan_out", [tensor])
            np.testing.assert_array_equal(result.as_numpy("BUMPED"), image + 1)
            np.testing.assert_array_equal(result.as_numpy("KEPT"), image)


def test_a_model_changes_its_inputs_in_place_and_only_its_own(server: ServerProcess) -> None:
    """``x += 1`` on an input works, as in Triton (its answer is the changed array, not the worker's
    bytes it lay over), and changes nothing later requests read: 120 images one after another, so
    that the worker's arena comes round to the same memory again, each come back plus one."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for seed in range(120):
            image = _image(seed % 3)  # the same three images: stale pages would show as +2
            tensor = grpcclient.InferInput("IN", list(SHAPE), "FP32")
            tensor.set_data_from_numpy(image)
            answer = client.infer("in_place", [tensor]).as_numpy("OUT")
            np.testing.assert_array_equal(answer, image + 1)
    finally:
        client.close()


def test_concurrent_clients_each_get_their_own_answer(server: ServerProcess) -> None:
    """Sixteen clients at once, each image different: an output region given to the next execution
    while the engine still read the last one's outputs would mix answers."""

    def run(seed: int) -> None:
        image = _image(seed)
        answer = (_http if seed % 2 else _grpc)(server, image)
        np.testing.assert_array_equal(answer["OUTPUT0"], image)
        np.testing.assert_array_equal(answer["OUTPUT1"], image * 2)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        for future in [pool.submit(run, seed) for seed in range(1, 97)]:
            future.result()


def test_outputs_read_later_are_never_overwritten(server: ServerProcess) -> None:
    """An ensemble whose second step reads the first step's outputs 20 ms later, from sixteen clients
    at once: each gets ``2 x + 1`` of its own image, though the first step ran the others' meanwhile."""

    def run(seed: int) -> None:
        image = _image(seed)[0]
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            tensor = grpcclient.InferInput("IMAGE", [1, *image.shape], "FP32")
            tensor.set_data_from_numpy(image[None])
            result = client.infer("chain", [tensor]).as_numpy("RESULT")
        finally:
            client.close()
        np.testing.assert_array_equal(result[0], image * 2 + 1)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        for future in [pool.submit(run, seed) for seed in range(1, 65)]:
            future.result()


def test_a_restarted_workers_new_arena_replaces_the_old_one(tmp_path: Path) -> None:
    """A worker killed and started again has a new request arena: the model process maps it and lets
    go of the old one, whose memory would otherwise stay held."""
    write_model(tmp_path, "where", WHERE_CONFIG, WHERE_PY)
    with ServerProcess([tmp_path], frontend_workers=1) as server:
        wait_for(lambda: len(workers(server)) == 1)
        image = _image(1)
        assert _grpc(server, image)["ARENAS"][0] == 1
        victim = workers(server)[0]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: len(workers(server)) == 1 and victim not in workers(server), timeout=30)
        server._wait("/v2/health/ready", timeout=30)
        answer = _grpc(server, image)
        np.testing.assert_array_equal(answer["OUTPUT1"], image * 2)
        assert answer["MAPPING"][0].decode().startswith("/memfd:naiad-requests-0")
        assert answer["ARENAS"][0] == 1


# ---- the pieces, on their own ----------------------------------------------------------------------


def test_tensors_in_a_shared_arena_are_placed_by_reference_and_read_back() -> None:
    arena = shm.Region.create(1 << 20)
    try:
        lent = shm.Region.attach(arena.path, arena.size, private=True)
        large = np.ndarray((100, 200), np.float32, arena.buffer, 4096)  # 80 KB, in the arena
        large[:] = np.arange(20_000, dtype=np.float32).reshape(100, 200)
        small = np.ndarray((4,), np.float32, arena.buffer, 0)  # in the message as bytes: not looked for
        elsewhere = np.ones((100, 200), np.float32)
        tensors = [
            Tensor("LARGE", "FP32", large),
            Tensor("SMALL", "FP32", small),
            Tensor("OWN", "FP32", elsewhere),
        ]
        spans = {7: arena.span()}
        shared = shm.locate(spans, tensors)
        assert shared == [(7, 4096), None, None]
        assert shm.locate(spans, tensors[1:]) is None
        assert shm.locate(spans, [Tensor("T", "FP32", large.T)]) is None  # not contiguous: copied
        assert shm.layout_size(tensors, shared) == 80_000  # only the one of its own takes room
        region = shm.Region.create(shm.layout_size(tensors, shared))
        try:
            placements = shm.place(region, tensors, shared)
            assert placements[0][4:] == (4096, 7)
            assert placements[1][4:] == (-1, small.tobytes())
            for placement, tensor in zip(placements, tensors, strict=True):
                read = shm.view(region, placement, {7: lent})
                np.testing.assert_array_equal(read, tensor.data)
                assert not read.flags.writeable
        finally:
            region.unlink()
    finally:
        arena.unlink()


def test_what_a_process_writes_in_a_shared_arena_stays_its_own_until_undone() -> None:
    made = shm.Region.create(1 << 20)
    try:
        mapped = shm.Region.attach(made.path, made.size, private=True)
        base = mapped.span()[0]
        written = shm.Written()
        offset = 3 * mmap.PAGESIZE + 64
        made.buffer[offset : offset + 8] = b"worker-1"
        placement: shm.Placement = ("X", "UINT8", (8,), "|u1", offset, 7)
        data = shm.view(None, placement, {7: mapped}, writable=True)
        assert bytes(data) == b"worker-1" and not written.any(base + offset, 8)
        data[:] = np.frombuffer(b"model-01", np.uint8)  # the model writes its input in place
        assert written.any(base + offset, 8) and not written.any(base, mmap.PAGESIZE)
        made.buffer[offset : offset + 8] = b"worker-2"  # the worker's next request, same memory
        assert bytes(made.buffer[offset : offset + 8]) == b"worker-2"  # never saw the model's write
        assert bytes(data) == b"model-01"  # this process still sees its own page
        written.undo(mapped, base, offset, 8)
        assert bytes(data) == b"worker-2" and not written.any(base + offset, 8)
    finally:
        made.unlink()


def test_a_range_checked_while_held_keeps_its_finding_until_released() -> None:
    """Between a model's return and the undo of its inputs nothing writes them: the output's check
    and the input's undo share one reading of the page map, and the write is still undone."""
    made = shm.Region.create(1 << 20)
    try:
        mapped = shm.Region.attach(made.path, made.size, private=True)
        base = mapped.span()[0]
        written = shm.Written()
        offset, nbytes = 2 * mmap.PAGESIZE, 3 * mmap.PAGESIZE
        made.buffer[offset : offset + 8] = b"worker-1"
        data = shm.view(None, ("X", "UINT8", (nbytes,), "|u1", offset, 7), {7: mapped}, writable=True)
        data[mmap.PAGESIZE + 5] = 9  # the model writes the middle page of its input
        written.hold()
        assert written.any(base + offset, nbytes)  # the output (its input returned) is not sent by reference
        assert not written.any(base + offset, 8)  # another range: read on its own
        written.undo(mapped, base, offset, nbytes)  # the input's undo: the same range, found written
        written.release()
        assert data[mmap.PAGESIZE + 5] == 0 and bytes(data[:8]) == b"worker-1"
        assert not written.any(base + offset, nbytes)  # released: read again, nothing of its own now
        written.hold()
        assert not written.any(base + offset, nbytes)
        data[0] = 1  # (never while held in the server; shows the finding is kept until released)
        assert not written.any(base + offset, nbytes)
        written.release()
        assert written.any(base + offset, nbytes)
    finally:
        made.unlink()


def test_without_a_readable_pagemap_every_page_counts_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where ``/proc/self/pagemap`` cannot be read (a sandbox), what the model may have written is
    dropped all the same: every page of an input counts as written."""
    real_open = os.open

    def refuse(path: str, *args: int) -> int:
        if path == "/proc/self/pagemap":
            raise PermissionError(path)
        return real_open(path, *args)

    monkeypatch.setattr(os, "open", refuse)
    made = shm.Region.create(1 << 20)
    try:
        mapped = shm.Region.attach(made.path, made.size, private=True)
        base = mapped.span()[0]
        written = shm.Written()
        made.buffer[0:8] = b"worker-1"
        data = shm.view(None, ("X", "UINT8", (8,), "|u1", 0, 7), {7: mapped}, writable=True)
        assert written.any(base, 8)  # unknown: counted as written
        data[:] = np.frombuffer(b"model-01", np.uint8)
        made.buffer[0:8] = b"worker-2"
        written.undo(mapped, base, 0, 8)
        assert bytes(data) == b"worker-2"
    finally:
        made.unlink()


def test_a_region_is_leased_while_any_view_of_it_lives() -> None:
    made = shm.Region.create(1 << 16)
    try:
        region = shm.Region.attach(made.path, made.size)
        placement: shm.Placement = ("X", "FP32", (2, 4), "<f4", 64, None)
        assert not region.leased()
        view = shm.view(region, placement)
        derived = view.reshape(8)[2:]
        assert region.leased()
        del view
        assert region.leased()  # a view of the view still reads the region
        del derived
        assert not region.leased()
        shm.copy(region, placement)
        assert not region.leased()  # a copy is its own
    finally:
        made.unlink()


def test_an_output_region_is_given_again_only_once_nothing_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "OUTPUT_REGIONS", 2)
    child = process._Child(None)  # type: ignore[arg-type]  # (its process is not needed here)
    made = []
    for _ in range(2):
        out = child.output()
        made.append(shm.Region.create(1 << 16))
        child.outputs[out] = shm.Region.attach(made[-1].path, made[-1].size)
    try:
        assert sorted(child.outputs) == [0, 1]
        view = shm.view(child.outputs[0], ("X", "FP32", (4,), "<f4", 0, None))
        child.spare.extend([0, 1])
        assert child.output() == 1  # 0 is still read
        # none is free, and two regions are read or in flight: the next ones are for copying
        assert child.output() == 2 and 2 in child.copying
        child.spare.append(2)
        assert child.output() == 2  # a copying region is free as soon as it was read
        del view
        assert child.output() == 0
    finally:
        for region in made:
            region.unlink()


def test_a_process_others_cannot_open_lends_nothing() -> None:
    """A non-dumpable engine's descriptors cannot be opened through /proc by its model processes: it
    lends no arena (its model processes then get copies), where a dumpable one lends each."""
    script = """
import ctypes, sys
from naiad.ipc import arena
from naiad.ipc.arena import Arena, SharedArenas
if sys.argv[1] == "no":
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
lent = SharedArenas()
fd = arena.create("probe", 1 << 20)
lent.add(Arena(fd, 1 << 20, writable=False), fd)
print(lent.lending, len(lent.spans))
"""
    for dumpable, expected in (("yes", "True 1"), ("no", "False 0")):
        done = subprocess.run(
            [sys.executable, "-c", script, dumpable], capture_output=True, text=True, check=True
        )
        assert done.stdout.strip() == expected, done.stderr
