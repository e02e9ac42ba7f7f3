"""System shared memory with tritonclient over HTTP and gRPC: registration, tensors in regions (BYTES
too), and every bounds attack a client can make, which must be refused without reading or writing
outside the region, and without hurting the server."""

from __future__ import annotations

import base64
import contextlib
import os
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import serialize_byte_tensor, serialized_byte_size

from tests.extensions.clients import PROTOCOLS, Client, client_for, refused, status_of
from tests.support.server import ServerProcess

SIZE = 64


class Regions:
    """Client-side POSIX shared memory objects, destroyed (and unregistered) after the test."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.handles: dict[str, Any] = {}

    def key(self, name: str) -> str:
        return f"/naiad_test_{os.getpid()}_{name}"

    def create(self, name: str, size: int = SIZE, register: bool = True, offset: int = 0) -> Any:
        handle = shm.create_shared_memory_region(name, self.key(name), size)
        self.handles[name] = handle
        if register:
            self.client.client.register_system_shared_memory(name, self.key(name), size - offset, offset=offset)
        return handle

    def unlink(self, name: str) -> None:
        """Remove the object's name while both sides keep it open (what a crashed client leaves)."""
        self.handles[name]._mpsm_handle.unlink()

    def close(self) -> None:
        self.client.client.unregister_system_shared_memory()
        for handle in self.handles.values():
            with contextlib.suppress(FileNotFoundError):  # unlinked by the test already
                shm.destroy_shared_memory_region(handle)


@pytest.fixture(params=PROTOCOLS)
def client(request: pytest.FixtureRequest, ext_server: ServerProcess) -> Iterator[Client]:
    with client_for(request.param, ext_server) as connected:
        yield connected


@pytest.fixture
def regions(client: Client) -> Iterator[Regions]:
    made = Regions(client)
    try:
        yield made
    finally:
        made.close()


def _add_sub(client: Client, in_shm: bool = True) -> tuple[Any, Any]:
    inputs = [client.input("INPUT0", [4], "FP32"), client.input("INPUT1", [4], "FP32")]
    if in_shm:
        inputs[0].set_shared_memory("in", 16)
        inputs[1].set_shared_memory("in", 16, offset=16)
    outputs = [client.output("OUTPUT0"), client.output("OUTPUT1")]
    return inputs, outputs


def test_register_status_and_unregister(client: Client, regions: Regions) -> None:
    regions.create("a")
    regions.create("b", size=128, offset=32)
    assert client.shm_status() == {
        "a": {"name": "a", "key": regions.key("a"), "offset": 0, "byte_size": SIZE},
        "b": {"name": "b", "key": regions.key("b"), "offset": 32, "byte_size": 96},
    }
    assert list(client.shm_status("b")) == ["b"]
    client.client.unregister_system_shared_memory("a")
    client.client.unregister_system_shared_memory("never-registered")
    assert list(client.shm_status()) == ["b"]
    with refused(status_of(client.protocol, 404, "NOT_FOUND"), "Unable to find system shared memory region: 'a'"):
        client.shm_status("a")
    client.client.unregister_system_shared_memory()
    assert client.shm_status() == {}


def test_inputs_and_outputs_in_shared_memory(client: Client, regions: Regions) -> None:
    a, b = np.arange(4, dtype=np.float32), np.full(4, 10, dtype=np.float32)
    shm.set_shared_memory_region(regions.create("in"), [a, b])
    out = regions.create("out")
    inputs, outputs = _add_sub(client)
    outputs[0].set_shared_memory("out", 16)
    outputs[1].set_shared_memory("out", 16, offset=32)
    result = client.client.infer("add_sub", inputs, outputs=outputs)
    response = result.get_response(**({} if client.protocol == "http" else {"as_json": True}))
    meta = response["outputs"][0]
    assert (meta["name"], meta["datatype"], [int(d) for d in meta["shape"]]) == ("OUTPUT0", "FP32", [4])
    assert "data" not in meta and "binary_data_size" not in meta.get("parameters", {})
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.float32, [4]), a + b)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.float32, [4], offset=32), a - b)
    # the bytes between the two outputs were never written
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.float32, [4], offset=16), np.zeros(4))


def test_mixed_shared_memory_and_inline_tensors(client: Client, regions: Regions) -> None:
    a, b = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    shm.set_shared_memory_region(regions.create("in"), [a])
    inputs, outputs = _add_sub(client, in_shm=False)
    inputs[0].set_shared_memory("in", 16)
    inputs[1].set_data_from_numpy(b)
    result = client.client.infer("add_sub", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_bytes_tensors_in_shared_memory(client: Client, regions: Regions) -> None:
    strings = np.array([b"hello", b"", b"w\x00rld", "\u00e9t\u00e9".encode()], dtype=np.object_)
    serialized = serialize_byte_tensor(strings)
    size = serialized_byte_size(serialized)
    shm.set_shared_memory_region(regions.create("in", 256), [serialized])
    out = regions.create("out", 256)
    tensor = client.input("INPUT0", [4], "BYTES")
    tensor.set_shared_memory("in", size)
    output = client.output("OUTPUT0")
    output.set_shared_memory("out", 256)
    client.client.infer("strings", [tensor], outputs=[output])
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.object_, [4]), strings)
    # a declared size that includes bytes past the last string is refused, not guessed at
    tensor.set_shared_memory("in", 256)
    with refused(status_of(client.protocol, 400, "INVALID_ARGUMENT"), "unexpected number of string elements 5"):
        client.client.infer("strings", [tensor])


def test_registration_bounds(client: Client, regions: Regions) -> None:
    regions.create("r", register=False)
    key, invalid = regions.key("r"), status_of(client.protocol, 400, "INVALID_ARGUMENT")
    register = client.client.register_system_shared_memory
    for byte_size, offset in [(SIZE + 1, 0), (SIZE, 1), (1, SIZE), (0, SIZE + 1), (0, 0), (8, 2**62)]:
        with refused(invalid, "failed to register shared memory region 'x': invalid args"):
            register("x", key, byte_size, offset=offset)
    for bad_key in [f"/naiad_test_{os.getpid()}_missing", "/../../etc/passwd", "/..", "//a/b"]:
        with refused(invalid, f"Unable to open shared memory region: '{bad_key}'"):
            register("x", bad_key, 8)
    for bad_key in ["/", "///", ""]:  # Triton's words for a key of nothing but '/'s
        with refused(invalid, f"cannot register shared memory region 'x' - invalid shm key '{bad_key}'"):
            register("x", bad_key, 8)
    for reserved in ["triton_python_backend_shm_region_x", "/triton_python_backend_shm_region_x",
                     "///triton_python_backend_shm_region_x"]:
        with refused(invalid, f"cannot register shared memory region 'x' with key '{reserved}' as the key "
                     "contains the reserved prefix 'triton_python_backend_shm_region_'"):
            register("x", reserved, 8)
    register("r", key, SIZE)
    with refused(status_of(client.protocol, 400, "ALREADY_EXISTS"), "shared memory region 'r' already in manager"):
        register("r", key, SIZE)
    with refused(invalid, "invalid shm key '/'"):  # the key is checked before the name, as in Triton
        register("r", "/", SIZE)
    register("s", "//" + key.lstrip("/"), SIZE)  # leading '/'s dropped, as shm_open drops them
    assert sorted(client.shm_status()) == ["r", "s"]


def test_negative_registration_over_http(ext_server: ServerProcess) -> None:
    """Only JSON can carry a negative offset or size (gRPC's are uint64)."""
    with client_for("http", ext_server) as client:
        regions = Regions(client)
        try:
            regions.create("r", register=False)
            for byte_size, offset in [(-8, 0), (8, -1)]:
                with refused("400", "expected an unsigned integer"):
                    client.client.register_system_shared_memory("x", regions.key("r"), byte_size, offset=offset)
        finally:
            regions.close()


def test_inference_bounds(client: Client, regions: Regions) -> None:
    shm.set_shared_memory_region(regions.create("in"), [np.ones(8, dtype=np.float32)])
    out = regions.create("out")
    invalid = status_of(client.protocol, 400, "INVALID_ARGUMENT")

    def attempt(input_offset: int = 16, input_size: int = 16, output_offset: int = 0, output_size: int = 16) -> None:
        inputs, outputs = _add_sub(client)
        inputs[1].set_shared_memory("in", input_size, offset=input_offset)
        outputs[0].set_shared_memory("out", output_size, offset=output_offset)
        client.client.infer("add_sub", inputs, outputs=outputs[:1])

    with refused(invalid, "Invalid offset for shared memory region: 'out'"):
        attempt(output_offset=SIZE)
    with refused(invalid, "Invalid offset + byte size for shared memory region: 'out'"):
        attempt(output_offset=60)
    with refused(invalid, "Invalid offset + byte size for shared memory region: 'in'"):
        attempt(input_offset=60)
    with refused(invalid, "Invalid offset for shared memory region: 'in'"):
        attempt(input_offset=SIZE)
    with refused(invalid, "input byte size mismatch for input 'INPUT1' for model 'add_sub'. Expected 16, got 32"):
        attempt(input_size=32)
    with refused(status_of(client.protocol, 500, "INTERNAL"), "should be at least 16 bytes to hold the results"):
        attempt(output_size=8)
    if client.protocol == "http":  # JSON carries any integer; gRPC's int64 cannot hold these
        with refused(invalid, "Invalid offset for shared memory region: 'out'"):
            attempt(output_offset=2**64 - 32)
        with refused(invalid, "Integer overflow detected: byte_size (18446744073709551584) + offset (32)"):
            attempt(output_offset=32, output_size=2**64 - 32)
        with refused(invalid, "Invalid offset for shared memory region: 'in'"):
            attempt(input_offset=-16)
    inputs = _add_sub(client)[0]
    inputs[0].set_shared_memory("never-registered", 16)
    with refused(status_of(client.protocol, 404, "NOT_FOUND"), "Unable to find shared memory region: 'never-registered'"):
        client.client.infer("add_sub", inputs)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.uint8, [SIZE]), np.zeros(SIZE))


def test_region_unlinked_while_registered(client: Client, regions: Regions) -> None:
    """The server holds the object open: unlinking its name changes nothing until unregistered."""
    a = np.arange(4, dtype=np.float32)
    handle = regions.create("in")
    shm.set_shared_memory_region(handle, [a, a])
    out = regions.create("out")
    regions.unlink("in")
    regions.unlink("out")
    assert not os.path.exists(f"/dev/shm{regions.key('in')}")
    inputs, outputs = _add_sub(client)
    outputs[0].set_shared_memory("out", 16)
    client.client.infer("add_sub", inputs, outputs=outputs[:1])
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.float32, [4]), a + a)
    client.client.unregister_system_shared_memory()


def test_region_truncated_while_registered(client: Client, regions: Regions, ext_server: ServerProcess) -> None:
    """A mapping would turn this into SIGBUS for the server; here it is the client's error."""
    regions.create("in")
    regions.create("out")
    os.truncate(f"/dev/shm{regions.key('in')}", 0)
    os.truncate(f"/dev/shm{regions.key('out')}", 0)
    inputs, outputs = _add_sub(client)
    with refused(status_of(client.protocol, 400, "INVALID_ARGUMENT"), "was the shared memory object truncated?"):
        client.client.infer("add_sub", inputs)
    inputs[0].set_data_from_numpy(np.zeros(4, dtype=np.float32))
    inputs[1].set_data_from_numpy(np.zeros(4, dtype=np.float32))
    outputs[0].set_shared_memory("out", 16)
    with refused(status_of(client.protocol, 400, "INVALID_ARGUMENT"), "was the shared memory object truncated?"):
        client.client.infer("add_sub", inputs, outputs=outputs[:1])
    assert os.stat(f"/dev/shm{regions.key('out')}").st_size == 0  # never grown back by a write
    with urllib.request.urlopen(f"http://{ext_server.http_url}/v2/health/live") as answer:
        assert answer.status == 200


def test_shared_memory_is_off_by_default(protocol: str, plain_server: ServerProcess) -> None:
    """Registering and unregistering either kind is refused as Triton refuses it (UNSUPPORTED); the
    status answers, empty."""
    with client_for(protocol, plain_server) as client:
        handle = shm.create_shared_memory_region("r", f"/naiad_test_{os.getpid()}_off", SIZE)
        try:
            disabled = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
            calls = [
                lambda: client.client.register_system_shared_memory("r", f"/naiad_test_{os.getpid()}_off", SIZE),
                lambda: client.client.unregister_system_shared_memory("r"),
                client.client.unregister_system_shared_memory,
                lambda: client.client.register_cuda_shared_memory("c", base64.b64encode(bytes(64)).decode(), 0, 16),
                client.client.unregister_cuda_shared_memory,
            ]
            for call in calls:
                with refused(status_of(protocol, 501, "UNIMPLEMENTED"), disabled):
                    call()
            assert client.shm_status() == {}
            status = client.client.get_cuda_shared_memory_status()
            assert not (status if protocol == "http" else status.regions)
        finally:
            shm.destroy_shared_memory_region(handle)


def test_unregistering_waits_for_the_requests_holding_a_region(
    client: Client, regions: Regions, ext_server: ServerProcess, tmp_path: Path
) -> None:
    """Triton's "awaiting unregister": a region a request in flight reads or writes stays registered,
    and usable by new requests, until the last of them ends; then it goes without a second call."""
    a, b = np.arange(4, dtype=np.float32), np.full(4, 10, dtype=np.float32)
    shm.set_shared_memory_region(regions.create("in"), [a, b])
    out = regions.create("out")

    def infer(gate: Path) -> None:
        with client_for(client.protocol, ext_server) as own:
            inputs, outputs = _add_sub(own)
            outputs[0].set_shared_memory("out", 16)
            outputs[1].set_shared_memory("out", 16, offset=32)
            own.client.infer("gated", inputs, outputs=outputs, parameters={"gate": str(gate)})

    def started(gate: Path) -> None:
        deadline = time.monotonic() + 30
        while not Path(f"{gate}.started").exists():
            assert time.monotonic() < deadline, "the request never reached the model"
            time.sleep(0.01)

    first, second = tmp_path / "first", tmp_path / "second"
    with ThreadPoolExecutor(2) as pool:
        answered = [pool.submit(infer, first)]
        started(first)
        client.client.unregister_system_shared_memory()  # every region, while one request holds both
        assert sorted(client.shm_status()) == ["in", "out"]
        with refused(status_of(client.protocol, 400, "ALREADY_EXISTS"), "shared memory region 'in' already in manager"):
            client.client.register_system_shared_memory("in", regions.key("in"), SIZE)
        answered.append(pool.submit(infer, second))  # a region awaiting unregistration still serves
        started(second)
        first.touch()
        answered[0].result(timeout=30)
        np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.float32, [4]), a + b)
        assert sorted(client.shm_status()) == ["in", "out"]  # the second request holds them still
        shm.set_shared_memory_region(out, [np.zeros(12, dtype=np.float32)])
        second.touch()
        answered[1].result(timeout=30)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.float32, [4], offset=32), a - b)
    assert client.shm_status() == {}
    with refused(status_of(client.protocol, 404, "NOT_FOUND"), "Unable to find system shared memory region: 'in'"):
        client.shm_status("in")
    client.client.register_system_shared_memory("in", regions.key("in"), SIZE)  # the name is free again
    assert list(client.shm_status()) == ["in"]


def test_cuda_shared_memory_answers_as_triton_without_gpus(protocol: str, ext_server: ServerProcess) -> None:
    with client_for(protocol, ext_server) as client:
        client.client.unregister_cuda_shared_memory()
        status = client.client.get_cuda_shared_memory_status()
        assert not (status if protocol == "http" else status.regions)
        with refused(status_of(protocol, 400, "INVALID_ARGUMENT"), "GPUs not supported"):
            handle = base64.b64encode(bytes(64)).decode()  # what cudashm.get_raw_handle gives
            client.client.register_cuda_shared_memory("c", handle, 0, 16)
