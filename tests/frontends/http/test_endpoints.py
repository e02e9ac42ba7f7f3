"""Health, metadata, config and routing, through tritonclient.http and raw HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.http import RawClient
from tests.support.server import ServerProcess


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


def test_health_is_200_with_empty_body(raw: RawClient) -> None:
    for path in ("/v2/health/live", "/v2/health/ready"):
        response = raw.request("GET", path)
        assert response.status == 200
        assert response.body == b""


def test_tritonclient_health_and_model_ready(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("add_sub", "2")
    assert not client.is_model_ready("no_such_model")


def test_server_metadata(client: httpclient.InferenceServerClient) -> None:
    metadata = client.get_server_metadata()
    assert metadata["name"] == "triton"
    # Triton 2.51's list, in its order (checked side by side: tests/observability/test_triton_reference.py)
    assert metadata["extensions"] == [
        "classification", "sequence", "model_repository", "model_repository(unload_dependents)",
        "schedule_policy", "model_configuration", "system_shared_memory", "cuda_shared_memory",
        "binary_tensor_data", "parameters", "statistics", "trace", "logging",
    ]  # fmt: skip


def test_model_metadata(client: httpclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("add_sub")
    assert metadata == {
        "name": "add_sub",
        "versions": ["1"],
        "platform": "python",
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [4]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [4]},
        ],
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [4]},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": [4]},
        ],
    }
    assert client.get_model_metadata("add_sub", "1")["versions"] == ["1"]


def test_batching_model_metadata_prepends_batch_dim(client: httpclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("batched_identity")
    assert metadata["inputs"] == [{"name": "INPUT0", "datatype": "INT32", "shape": [-1, -1]}]


def test_unknown_model_and_version_messages(client: httpclient.InferenceServerClient, raw: RawClient) -> None:
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope' is not found"):
        client.get_model_metadata("nope")
    response = raw.request("GET", "/v2/models/add_sub/versions/7")
    assert response.status == 404
    assert response.error == "Request for unknown model: 'add_sub' version 7 is not found"
    assert raw.request("GET", "/v2/models/add_sub/versions/abc").status == 404


def test_a_version_is_read_as_triton_reads_it(raw: RawClient) -> None:
    # (Triton 2.51, side by side: "01" is version 1, and the metadata names "1"; "00" is version 0)
    response = raw.request("GET", "/v2/models/add_sub/versions/01")
    assert (response.status, json.loads(response.body)["versions"]) == (200, ["1"])
    assert raw.request("GET", "/v2/models/add_sub/versions/00").error == (
        "Request for unknown model: 'add_sub' version 0 is not found"
    )
    response = raw.request("GET", "/v2/models/add_sub/versions/99999999999999999999")
    assert (response.status, response.error) == (
        400,
        "failed to get model version from specified version string '99999999999999999999' (details: stol), "
        "version should be an integral value > 0",
    )


def test_model_config_is_normalized_json(client: httpclient.InferenceServerClient) -> None:
    config = client.get_model_config("add_sub")
    assert config["name"] == "add_sub"
    assert config["backend"] == "python"
    assert config["max_batch_size"] == 0
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    assert config["input"][0]["dims"] == [4]  # int64 as JSON numbers, as Triton prints them
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    assert config["instance_group"][0]["count"] == 1
    assert config["instance_group"][0]["name"] == "add_sub_0"
    assert config["default_model_filename"] == "model.py"
    assert config["optimization"]["input_pinned_memory"] == {"enable": True}


def test_unconfigured_instance_group_gets_model_name(client: httpclient.InferenceServerClient) -> None:
    config = client.get_model_config("identity_int32")
    assert config["instance_group"][0]["name"] == "identity_int32"


def test_routing_errors(raw: RawClient) -> None:
    not_found = raw.request("GET", "/v2/nothing/here")
    assert (not_found.status, not_found.error) == (404, "Not Found")
    wrong_method = raw.request("GET", "/v2/models/add_sub/infer")
    assert (wrong_method.status, wrong_method.error) == (405, "Method Not Allowed")
    assert raw.request("POST", "/v2/health/live").status == 405


def test_query_parameters_are_ignored(raw: RawClient) -> None:
    assert raw.request("GET", "/v2/models/add_sub?test_1=1&test_2=2").status == 200
    assert raw.request("GET", "/v2/health/ready?x=y").status == 200


def test_model_ready_for_unknown_model_is_400(raw: RawClient) -> None:
    response = raw.request("GET", "/v2/models/nope/ready")
    assert (response.status, response.error) == (400, "Model version not ready")


def test_repository_index_lists_models(raw: RawClient) -> None:
    response = raw.request("POST", "/v2/repository/index", "")
    assert response.status == 200
    entries = {e["name"]: e for e in response.json()}
    assert entries["add_sub"] == {"name": "add_sub", "version": "1", "state": "READY"}  # Triton's, exactly
    ready_only = raw.post_json("/v2/repository/index", {"ready": True}).json()
    assert all(e["state"] == "READY" for e in ready_only)
    assert raw.post_json("/v2/repository/index", {"ready": "yes"}).status == 400
    # Naiad's extension, when asked for: the resident bytes each version's load added
    measured = {e["name"]: e for e in raw.post_json("/v2/repository/index", {"memory_bytes": True}).json()}
    memory = measured["add_sub"].pop("memory_bytes")
    assert measured["add_sub"] == entries["add_sub"]
    assert isinstance(memory, int) and memory > 0  # a Python model: its model process's resident memory
    refused = raw.post_json("/v2/repository/index", {"memory_bytes": 1})
    assert (refused.status, refused.error) == (400, "Unable to parse 'memory_bytes': expected a boolean")


def test_load_and_unload_rejected_in_none_mode(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.load_model("add_sub")
    assert "explicit model load / unload is not allowed if polling is enabled" in str(info.value)
    assert info.value.status() == "503"
    with pytest.raises(InferenceServerException, match="not allowed if polling is enabled"):
        client.unload_model("add_sub")
    assert client.is_model_ready("add_sub")
