"""Version policies decide which versions load; a request without a version gets the highest ready one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.models import write_model
from tests.support.server import ServerProcess

PLUS_VERSION_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() + self.version)])
            for r in requests]
"""

POLICIES = {
    "default_latest": "",
    "latest_two": "version_policy: { latest: { num_versions: 2 } }",
    "all_versions": "version_policy: { all: {} }",
    "specific": "version_policy: { specific: { versions: [1, 3] } }",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("versions")
    for name, policy in POLICIES.items():
        config = f"""
        backend: "python"
        {policy}
        input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
        output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
        """
        for version in (1, 2, 3):
            write_model(repo, name, config, PLUS_VERSION_PY, version=version)
        (repo / name / "01").mkdir()  # leading zero: ignored, as Triton does
        (repo / name / "latest").mkdir()  # not numeric: ignored
    with ServerProcess([repo]) as process:
        yield process


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


def _infer(client: httpclient.InferenceServerClient, model: str, version: str = "") -> int:
    inp = httpclient.InferInput("INPUT0", [1], "INT32")
    inp.set_data_from_numpy(np.array([100], dtype=np.int32))
    return int(client.infer(model, [inp], model_version=version).as_numpy("OUTPUT0")[0])


@pytest.mark.parametrize(
    ("model", "versions"),
    [
        ("default_latest", ["3"]),
        ("latest_two", ["2", "3"]),
        ("all_versions", ["1", "2", "3"]),
        ("specific", ["1", "3"]),
    ],
)
def test_policy_selects_versions(
    client: httpclient.InferenceServerClient, model: str, versions: list[str]
) -> None:
    assert client.get_model_metadata(model)["versions"] == versions
    assert _infer(client, model) == 100 + int(versions[-1])
    for version in versions:
        assert _infer(client, model, version) == 100 + int(version)
        assert client.is_model_ready(model, version)
    for version in {"1", "2", "3"} - set(versions):
        assert not client.is_model_ready(model, version)


def test_unselected_version_is_not_found(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(httpclient.InferenceServerException, match="'specific' version 2 is not found"):
        _infer(client, "specific", "2")


def test_ignored_version_folders_are_warned_about(server: ServerProcess) -> None:
    """Triton's two warnings, once per model: the folders that are not versions say why."""
    warnings = [line for line in server.log().splitlines() if line.startswith("W")]
    zeros = "\"ignore version directory '01' which contains leading zeros in its directory name\""
    not_numbers = "\"ignore version directory 'latest' which fails to convert to integral number\""
    assert sum(line.endswith(zeros) for line in warnings) == len(POLICIES)
    assert sum(line.endswith(not_numbers) for line in warnings) == len(POLICIES)


def test_version_zero_is_a_version(tmp_path: Path) -> None:
    """``0`` is a version (only a zero before other digits makes a name no version), and a model's own
    folders beside its versions (custom configs) are no versions nor warned about."""
    config = """
    backend: "python"
    version_policy: { all: {} }
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
    """
    for version in (0, 1):
        write_model(tmp_path, "zero", config, PLUS_VERSION_PY, version=version)
    (tmp_path / "zero" / "configs").mkdir()
    with ServerProcess([tmp_path]) as process:
        client = httpclient.InferenceServerClient(process.http_url)
        try:
            assert client.get_model_metadata("zero")["versions"] == ["0", "1"]
            assert _infer(client, "zero", "0") == 100
        finally:
            client.close()
        assert "ignore version directory" not in process.log()
