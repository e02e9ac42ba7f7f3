"""Every non-inference RPC, through the real ``tritonclient.grpc`` against a real server.

Features that land later (statistics, trace, dynamic logging, shared memory) must refuse
with Triton's status and message, never crash or succeed silently.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg
from tritonclient.utils import InferenceServerException

from tests.support.server import ServerProcess


@pytest.fixture
def client(grpc_server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(grpc_server.grpc_url) as c:
        yield c


def _refusal(call: object, *args: object, **kwargs: object) -> tuple[str, str]:
    assert callable(call)
    with pytest.raises(InferenceServerException) as info:
        call(*args, **kwargs)
    return str(info.value.status()), str(info.value.message())


def test_health_rpcs_answer_live_and_ready(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()


def test_model_ready_is_false_not_an_error_for_unknown_models_and_versions(
    client: grpcclient.InferenceServerClient,
) -> None:
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert client.is_model_ready("add_sub", "01")
    assert not client.is_model_ready("add_sub", "7")
    assert not client.is_model_ready("nope")


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("x", "failed to get model version from specified version string 'x' (details: stol), "
              "version should be an integral value > 0"),
        ("-1", "invalid model version specified '-1' , version should be an integral value > 0"),
    ],
)
def test_a_version_that_is_not_a_number_is_invalid(
    client: grpcclient.InferenceServerClient, version: str, message: str
) -> None:
    assert _refusal(client.is_model_ready, "add_sub", version) == ("StatusCode.INVALID_ARGUMENT", message)
    assert _refusal(client.get_model_metadata, "add_sub", version) == ("StatusCode.INVALID_ARGUMENT", message)
    assert _refusal(client.get_model_config, "add_sub", version) == ("StatusCode.INVALID_ARGUMENT", message)


def test_server_metadata_names_triton_and_its_extensions(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_server_metadata()
    assert (metadata.name, metadata.version) == ("triton", "2.51.0")
    assert "model_repository" in metadata.extensions
    assert {"statistics", "trace", "logging"} <= set(metadata.extensions)


def test_model_metadata_and_config(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("add_sub")
    assert (metadata.name, list(metadata.versions), metadata.platform) == ("add_sub", ["1"], "python")
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("INPUT0", "FP32", [4]),
        ("INPUT1", "FP32", [4]),
    ]
    assert [t.name for t in metadata.outputs] == ["OUTPUT0", "OUTPUT1"]
    batched = client.get_model_metadata("identity_int32", "1")
    assert [list(t.shape) for t in batched.inputs] == [[-1, -1]]
    config = client.get_model_config("add_sub").config
    assert (config.name, config.backend) == ("add_sub", "python")
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]


def test_unknown_models_and_versions_are_not_found(client: grpcclient.InferenceServerClient) -> None:
    unknown = ("StatusCode.NOT_FOUND", "Request for unknown model: 'nope' is not found")
    assert _refusal(client.get_model_metadata, "nope") == unknown
    assert _refusal(client.get_model_config, "nope") == unknown
    assert _refusal(client.get_model_metadata, "add_sub", "7") == (
        "StatusCode.NOT_FOUND",
        "Request for unknown model: 'add_sub' version 7 is not found",
    )


def test_repository_index_lists_every_model(client: grpcclient.InferenceServerClient) -> None:
    index = client.get_model_repository_index()
    rows = {m.name: (m.version, m.state) for m in index.models}
    assert rows["add_sub"] == ("1", "READY")
    assert rows["decoupled"] == ("1", "READY")
    assert {m.name for m in client.get_model_repository_index().models} == set(rows)


def test_model_control_is_refused_as_in_none_mode(client: grpcclient.InferenceServerClient) -> None:
    refused = ("StatusCode.UNAVAILABLE", "explicit model load / unload is not allowed if polling is enabled")
    assert _refusal(client.load_model, "add_sub") == refused
    assert _refusal(client.unload_model, "add_sub") == refused


def test_a_repository_name_is_unsupported(grpc_server: ServerProcess) -> None:
    with grpc.insecure_channel(grpc_server.grpc_url) as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)
        for call, request in [
            (stub.RepositoryIndex, pb.RepositoryIndexRequest(repository_name="other")),
            (stub.RepositoryModelLoad, pb.RepositoryModelLoadRequest(repository_name="other", model_name="m")),
            (stub.RepositoryModelUnload, pb.RepositoryModelUnloadRequest(repository_name="other")),
        ]:
            with pytest.raises(grpc.RpcError) as info:
                call(request)
            assert info.value.code() is grpc.StatusCode.UNIMPLEMENTED
            assert info.value.details() == "'repository_name' specification is not supported"


def test_statistics_trace_and_logging_extensions_answer(client: grpcclient.InferenceServerClient) -> None:
    # Their behaviour is tested in tests/observability; here: the RPCs are bound and answer.
    assert client.get_inference_statistics("add_sub").model_stats[0].name == "add_sub"
    assert list(client.get_trace_settings().settings["trace_level"].value) == ["OFF"]
    assert client.get_log_settings().settings["log_info"].bool_param


def test_shared_memory_status_answers_with_no_regions(client: grpcclient.InferenceServerClient) -> None:
    # Without --allow-client-shm unregistering is refused too (tests/extensions/test_shared_memory.py).
    assert not client.get_system_shared_memory_status().regions
    assert not client.get_cuda_shared_memory_status().regions
    assert _refusal(client.get_system_shared_memory_status, "region") == (
        "StatusCode.NOT_FOUND", "Unable to find system shared memory region: 'region'"
    )
    assert _refusal(client.get_cuda_shared_memory_status, "region") == (
        "StatusCode.NOT_FOUND", "Unable to find cuda shared memory region: 'region'"
    )


def test_registering_shared_memory_is_refused(client: grpcclient.InferenceServerClient) -> None:
    disabled = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
    assert _refusal(client.register_system_shared_memory, "region", "/key", 64) == (
        "StatusCode.UNIMPLEMENTED", disabled
    )
    assert _refusal(client.register_cuda_shared_memory, "region", b"\0" * 64, 0, 64) == (
        "StatusCode.UNIMPLEMENTED", disabled
    )


def test_standard_health_check_follows_readiness(grpc_server: ServerProcess) -> None:
    with grpc.insecure_channel(grpc_server.grpc_url) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "inference.GRPCInferenceService", "anything"):
            response = stub.Check(health_pb2.HealthCheckRequest(service=service))
            assert response.status == health_pb2.HealthCheckResponse.SERVING


def test_health_check_says_not_serving_while_a_model_is_unavailable(
    tmp_path: Path, frontend_workers: int
) -> None:
    broken = tmp_path / "broken" / "1"
    broken.mkdir(parents=True)
    (broken / "model.py").write_text("raise RuntimeError('no')\n")
    (tmp_path / "broken" / "config.pbtxt").write_text('backend: "python"\n')
    args = ["--exit-on-error=false"]
    with ServerProcess([tmp_path], args, wait_ready=False, frontend_workers=frontend_workers) as server:
        with grpcclient.InferenceServerClient(server.grpc_url) as c:
            deadline = time.monotonic() + 30
            while not any(m.state == "UNAVAILABLE" for m in c.get_model_repository_index().models):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert c.is_server_live()
            assert not c.is_server_ready()
        with grpc.insecure_channel(server.grpc_url) as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest()).status
            assert status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_explicit_model_control_over_grpc(grpc_repository: Path, frontend_workers: int) -> None:
    """load/unload reach the data plane; ``file:`` contents travel raw in ``bytes_param``."""
    args = ["--model-control-mode=explicit", "--load-model=add_sub"]
    with (
        ServerProcess([grpc_repository], args, frontend_workers=frontend_workers) as server,
        grpcclient.InferenceServerClient(server.grpc_url) as c,
    ):
        assert not c.is_model_ready("identity_fp32")
        c.load_model("identity_fp32")
        assert c.is_model_ready("identity_fp32")
        c.unload_model("identity_fp32")
        assert not c.is_model_ready("identity_fp32")
        config = json.dumps({
            "backend": "python",
            "max_batch_size": 8,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        })
        doubling = (grpc_repository / "identity_fp32" / "1" / "model.py").read_text().replace(
            'Tensor("OUTPUT0", data)', 'Tensor("OUTPUT0", data * 2)'
        )
        request = pb.RepositoryModelLoadRequest(model_name="identity_fp32")
        request.parameters["config"].string_param = config
        request.parameters["file:1/model.py"].bytes_param = doubling.encode()
        with grpc.insecure_channel(server.grpc_url) as channel:
            pbg.GRPCInferenceServiceStub(channel).RepositoryModelLoad(request)
        tensor = grpcclient.InferInput("INPUT0", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.array([[1, 2]], dtype=np.float32))
        assert c.infer("identity_fp32", [tensor]).as_numpy("OUTPUT0").tolist() == [[2, 4]]
        unload = pb.RepositoryModelUnloadRequest(model_name="add_sub")
        unload.parameters["unload_dependents"].string_param = "yes"
        with grpc.insecure_channel(server.grpc_url) as channel, pytest.raises(grpc.RpcError) as info:
            pbg.GRPCInferenceServiceStub(channel).RepositoryModelUnload(unload)
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
        c.unload_model("add_sub", unload_dependents=True)
        assert not c.is_model_ready("add_sub")
