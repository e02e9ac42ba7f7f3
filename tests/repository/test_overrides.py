"""Load parameters: ``config`` JSON overrides, ``file:`` overrides, and the pinned default version."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from tritonclient.http import InferenceServerClient

from tests.repository.clients import RepositoryClient, error_of, rows
from tests.repository.conftest import connect
from tests.repository.models import marked_py, write_marked
from tests.support.server import ServerProcess

POLL_FAILURE = "failed to load '{}', failed to poll from model repository"


def marked_config_json(**extra: Any) -> str:
    config: dict[str, Any] = {
        "backend": "python",
        "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [1]}],
        "output": [
            {"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [1]},
            {"name": "MARK", "data_type": "TYPE_STRING", "dims": [1]},
        ],
    }
    config.update(extra)
    return json.dumps(config)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, protocol: str) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("overrides-repo")
    write_marked(repo, "plain", "p")
    write_marked(repo, "multi", "m", versions=(1, 2, 3))
    with ServerProcess([repo], ["--model-control-mode=explicit"]) as process:
        yield process


@pytest.fixture
def client(protocol: str, server: ServerProcess) -> Iterator[RepositoryClient]:
    client = connect(protocol, server)
    yield client
    client.close()


def test_config_override_replaces_config_pbtxt_and_accepts_int64_as_string(
    client: RepositoryClient, server: ServerProcess
) -> None:
    client.load("plain", config=marked_config_json(max_batch_size="8"))
    http = InferenceServerClient(server.http_url)
    assert http.get_model_config("plain")["max_batch_size"] == 8
    http.close()
    client.load("plain")  # without the override, config.pbtxt again
    assert client.mark("plain") == "p:1"


def test_config_override_keys_may_be_bare_words_as_triton_parses_them(
    client: RepositoryClient, server: ServerProcess
) -> None:
    """Triton 2.51 loads ``{..., direct: {...}}`` (protobuf's JSON parser takes bare keys; NVIDIA's
    qa/L0_iterative_sequence sends one), and refuses what is not JSON all the same."""
    override = marked_config_json(max_batch_size=2)[:-1] + ', sequence_batching: { direct: { } } }'
    client.load("plain", config=override)
    http = InferenceServerClient(server.http_url)
    config = http.get_model_config("plain")
    assert "direct" in config["sequence_batching"] and config["max_batch_size"] == 2
    http.close()
    client.load("plain")
    assert error_of(client.load, "plain", config='{"x": 1,, }') == ("500", POLL_FAILURE.format("plain"))


def test_invalid_config_override_keeps_the_loaded_model(client: RepositoryClient) -> None:
    client.load("plain")
    assert error_of(client.load, "plain", config="{not json") == ("500", POLL_FAILURE.format("plain"))
    assert client.mark("plain") == "p:1"


def test_file_override_loads_a_model_from_the_request_alone(client: RepositoryClient) -> None:
    source = textwrap.dedent(marked_py("from-request")).encode()
    client.load("virtual", config=marked_config_json(), files={"file:1/model.py": source})
    assert client.mark("virtual") == "from-request:1"
    assert rows(client.index(), "virtual") == [{"version": "1", "state": "READY"}]
    client.unload("virtual")


def test_file_override_paths_may_start_with_a_slash_as_in_triton(client: RepositoryClient) -> None:
    """NVIDIA's qa/L0_backend_python/model_control sends ``file:/1/model.py`` (Triton 2.51: 200)."""
    source = textwrap.dedent(marked_py("slash")).encode()
    client.load("slashed", config=marked_config_json(), files={"file:/1/model.py": source})
    assert client.mark("slashed") == "slash:1"
    client.unload("slashed")
    files = {"file:/../1/model.py": source}  # still no way out of the model folder
    assert error_of(client.load, "escaped", config=marked_config_json(), files=files) == (
        "500",
        POLL_FAILURE.format("escaped"),
    )


def test_model_names_with_shell_characters_are_refused_as_by_triton(client: RepositoryClient) -> None:
    """NVIDIA's qa/L0_backend_python/model_control: the Python backend refuses a stub name with shell
    characters (INVALID_ARG), and the model is not served."""
    source = textwrap.dedent(marked_py("shell")).encode()
    for name in ("model;test", "model$test", "model'test'", "model!test", "model\\test"):
        status, message = error_of(
            client.load, name, config=marked_config_json(), files={"file:/1/model.py": source}
        )
        assert status == "400" and "Invalid stub name: contains invalid characters" in message, name
        assert all(row["state"] != "READY" for row in rows(client.index(), name)), name


def test_file_override_replaces_the_repository_files(client: RepositoryClient) -> None:
    source = textwrap.dedent(marked_py("override")).encode()
    client.load("plain", config=marked_config_json(), files={"file:5/model.py": source})
    assert client.mark("plain") == "override:5"
    client.load("plain")
    assert client.mark("plain") == "p:1"


def test_file_override_needs_config(client: RepositoryClient) -> None:
    assert error_of(client.load, "plain", files={"file:1/model.py": b"x"}) == (
        "500",
        POLL_FAILURE.format("plain"),
    )


def test_file_override_cannot_escape_its_folder(client: RepositoryClient) -> None:
    files = {"file:../../escape.py": b"x"}
    assert error_of(client.load, "plain", config=marked_config_json(), files=files) == (
        "500",
        POLL_FAILURE.format("plain"),
    )


def test_unknown_and_malformed_parameters_are_rejected(client: RepositoryClient) -> None:
    status, message = error_of(client.load, "plain", parameters={"bogus": "x"})
    assert status == "400" and "unexpected load parameter 'bogus'" in message
    status, message = error_of(client.load, "plain", parameters={"file:1/model.py": "%%%not base64"})
    assert status == "400" and "not valid base64" in message


def test_pinned_default_version_make_before_break_rollout(client: RepositoryClient) -> None:
    both = marked_config_json(version_policy={"specific": {"versions": [1, 2]}})
    client.load("multi", config=marked_config_json(version_policy={"specific": {"versions": [1]}}))
    assert client.mark("multi") == "m:1"
    # load the new version next to the old one, still serving the old one by default
    client.load("multi", config=both, parameters={"default_version": 1})
    assert client.mark("multi") == "m:1" and client.mark("multi", "2") == "m:2"
    assert client.is_ready("multi") and client.is_ready("multi", "2")
    # switch: nothing reloads (same config and files), only the default moves
    executions = client.infer("multi", "2")[1]
    client.load("multi", config=both, parameters={"default_version": "2"})
    assert client.infer("multi") == ("m:2", executions + 1)
    # the pin survives loads that do not mention it, while its version stays loaded
    client.load("multi", config=marked_config_json(version_policy={"specific": {"versions": [2]}}))
    assert client.mark("multi") == "m:2"
    # unpinning returns to Triton's rule: the highest ready version
    client.load(
        "multi", config=marked_config_json(version_policy={"all": {}}), parameters={"default_version": ""}
    )
    assert client.mark("multi") == "m:3"
    client.unload("multi")


def test_pinning_a_version_that_is_not_loaded_fails_and_changes_nothing(client: RepositoryClient) -> None:
    client.load("multi")
    status, message = error_of(client.load, "multi", parameters={"default_version": 1})
    assert status == "400"
    assert "default version 1 is not among the versions to load [3]" in message
    assert client.mark("multi") == "m:3"
    assert error_of(client.load, "multi", parameters={"default_version": "one"})[0] == "400"
    client.unload("multi")


def test_config_override_merges_into_config_pbtxt_with_its_own_version_policy(
    client: RepositoryClient, server: ServerProcess
) -> None:
    """``config_override`` (Naiad) changes only what it names: the rest comes from config.pbtxt, a
    version policy replaces config.pbtxt's, and the default pin travels in the same load."""
    override = {
        "parameters": {"flavour": {"string_value": "a"}},
        "version_policy": {"specific": {"versions": [1, 2]}},
    }
    client.load("multi", parameters={"config_override": json.dumps(override), "default_version": 1})
    http = InferenceServerClient(server.http_url)
    config = http.get_model_config("multi")
    assert config["parameters"]["flavour"]["string_value"] == "a"
    assert config["backend"] == "python" and [o["name"] for o in config["output"]] == ["OUTPUT0", "MARK"]
    assert config["version_policy"] == {"specific": {"versions": [1, 2]}}
    assert client.mark("multi") == "m:1" and client.mark("multi", "2") == "m:2"
    http.close()
    refused = error_of(client.load, "multi", parameters={"config_override": "[1]"})
    assert refused == ("500", POLL_FAILURE.format("multi"))
    assert client.mark("multi") == "m:1"  # the loaded model keeps serving
    client.unload("multi")
