"""Generated malformed shared memory requests: register/status/unregister over HTTP and gRPC (system
and CUDA), and inference requests whose tensors point into regions with wrong names, offsets and
sizes.  One real 64-byte region exists, so bounds are checked against something real."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import tritonclient.utils.shared_memory as shm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from tests.fuzz.conftest import examples
from tests.fuzz.tally import Tally
from tests.fuzz.test_http import json_values, send
from tests.support.http import RawClient
from tests.support.server import ServerProcess

REGION_SIZE = 64
KEY = "/naiad_fuzz_region"

region_names = st.sampled_from(["real", "ghost", "", "a/b", "x" * 200, "real%00"])
keys = st.sampled_from([KEY, "/naiad_fuzz_absent", "", "no_slash", "/../etc/passwd", "/" + "k" * 300])
sizes = st.integers(-2, 2**64 + 1) | st.integers(0, REGION_SIZE + 8)


@pytest.fixture(scope="module")
def region(server: ServerProcess) -> Iterator[None]:
    handle = shm.create_shared_memory_region("real", KEY, REGION_SIZE)
    client = RawClient(server.http_url)
    try:
        body = json.dumps({"key": KEY, "offset": 0, "byte_size": REGION_SIZE})
        assert client.request("POST", "/v2/systemsharedmemory/region/real/register", body).status == 200
        yield
        client.request("POST", "/v2/systemsharedmemory/unregister")
    finally:
        client.close()
        shm.destroy_shared_memory_region(handle)


@pytest.fixture(scope="module")
def client(server: ServerProcess, region: None) -> Iterator[RawClient]:
    client = RawClient(server.http_url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def channel(server: ServerProcess, region: None) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield channel


FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@st.composite
def register_bodies(draw: st.DrawFn) -> bytes:
    body: dict[str, Any] = {}
    for field in draw(st.sets(st.sampled_from(["key", "offset", "byte_size", "device_id", "raw_handle"]))):
        if field == "key":
            body[field] = draw(keys | json_values)
        elif field == "raw_handle":
            body[field] = draw(st.sampled_from([{"b64": "AAAA"}, {"b64": "!"}, "x", None]))
        else:
            body[field] = draw(sizes | json_values)
    return json.dumps(body).encode() if draw(st.integers(0, 9)) else draw(st.binary(max_size=32))


@settings(FUZZ, max_examples=examples(100, 600))
@given(
    kind=st.sampled_from(["systemsharedmemory", "cudasharedmemory"]),
    action=st.sampled_from(["register", "status", "unregister"]),
    name=region_names,
    body=register_bodies(),
)
def test_http_region_requests(client: RawClient, tally: Tally, kind: str, action: str, name: str, body: bytes) -> None:
    if name == "real" and action == "unregister":
        return  # the region the inference fuzzing points into stays registered
    path = f"/v2/{kind}/region/{name}/{action}" if name else f"/v2/{kind}/{action}"
    if action == "unregister" and not name:
        return  # unregister-all would drop the real region too
    send(client, tally, "GET" if action == "status" else "POST", path, body if action == "register" else None, {})


@st.composite
def shm_infer_bodies(draw: st.DrawFn) -> bytes:
    """add_sub with its inputs (and maybe an output) in shared memory, at fuzzed places."""
    def place() -> dict[str, Any]:
        params: dict[str, Any] = {"shared_memory_region": draw(region_names | json_values)}
        for key in ("shared_memory_offset", "shared_memory_byte_size"):
            if draw(st.integers(0, 4)):
                params[key] = draw(sizes | json_values)
        return params

    inputs = [
        {"name": name, "datatype": draw(st.sampled_from(["FP32", "BYTES", "INT8"])), "shape": draw(
            st.sampled_from([[4], [0], [16], [2, 2], [-1]])), "parameters": place()}
        for name in ("INPUT0", "INPUT1")
    ]
    document: dict[str, Any] = {"inputs": inputs}
    if draw(st.booleans()):
        document["outputs"] = [{"name": "OUTPUT0", "parameters": place()}]
    return json.dumps(document).encode()


@settings(FUZZ, max_examples=examples(100, 600))
@given(body=shm_infer_bodies())
def test_http_infer_through_shared_memory(client: RawClient, tally: Tally, body: bytes) -> None:
    send(client, tally, "POST", "/v2/models/add_sub/infer", body, {})


@st.composite
def grpc_region_requests(draw: st.DrawFn) -> tuple[str, bytes]:
    action = draw(
        st.sampled_from(["SystemSharedMemoryRegister", "SystemSharedMemoryStatus", "SystemSharedMemoryUnregister",
                         "CudaSharedMemoryRegister", "CudaSharedMemoryStatus", "CudaSharedMemoryUnregister"])
    )  # fmt: skip
    name = draw(region_names.filter(lambda n: n not in ("real", "")))  # never drop the real region
    if action == "SystemSharedMemoryRegister":
        message: Any = pb.SystemSharedMemoryRegisterRequest(
            name=draw(region_names), key=draw(keys), offset=draw(st.integers(0, 2**64 - 1)),
            byte_size=draw(st.integers(0, 2**64 - 1) | st.integers(0, 80)),
        )  # fmt: skip
    elif action == "CudaSharedMemoryRegister":
        message = pb.CudaSharedMemoryRegisterRequest(
            name=name, raw_handle=draw(st.binary(max_size=80)), device_id=draw(st.integers(-(2**63), 2**63 - 1)),
            byte_size=draw(st.integers(0, 2**64 - 1)),
        )  # fmt: skip
    elif action.endswith("Status"):
        message = (pb.SystemSharedMemoryStatusRequest if action.startswith("System") else pb.CudaSharedMemoryStatusRequest)(
            name=draw(region_names)
        )
    else:
        message = (
            pb.SystemSharedMemoryUnregisterRequest if action.startswith("System") else pb.CudaSharedMemoryUnregisterRequest
        )(name=name)
    data = message.SerializeToString()
    if not action.endswith("Unregister") and not draw(st.integers(0, 9)):
        data = draw(st.binary(max_size=40))  # (random bytes may parse as "unregister all")
    return action, data


@settings(FUZZ, max_examples=examples(100, 700))
@given(case=grpc_region_requests())
def test_grpc_region_requests(channel: grpc.Channel, tally: Tally, case: tuple[str, bytes]) -> None:
    action, data = case
    call = channel.unary_unary(f"/inference.GRPCInferenceService/{action}")
    what = f"{action} {data[:200]!r}"
    try:
        call(data, timeout=30)
        tally.grpc(None, "", what)
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            tally.crash(what)
            raise
        tally.grpc(error.code().name, error.details() or "", what)
