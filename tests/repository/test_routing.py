"""Weighted version routing and mirroring (``version_weights``, ``mirror``): a canary and a shadow.

Both server modes (one process; frontend workers over one engine) and both protocols, with real
tritonclient clients.  The models answer with the version that served them (``MARK``), so a test
counts where requests went; the mirror version's own counters come from ``/stats`` and ``/metrics``.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.repository.clients import RepositoryClient, error_of
from tests.repository.conftest import connect
from tests.repository.models import write_marked
from tests.support import modes
from tests.support.http import RawClient
from tests.support.models import write_model
from tests.support.server import ServerProcess

#: Every version, so a load's routing parameters may name any of them.
ALL_VERSIONS = "version_policy: { all { } }"

#: A second version that fails every request (a bad shadow): the client must not notice it.  It raises:
#: an error given as a response would count as a success, as in Triton.
FAILING_PY = """
class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("shadow broke")
"""


@pytest.fixture(scope="module", params=[0, modes.WORKERS], ids=["in-process", "workers"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("routing-repo")
    write_marked(repo, "canary", "c", versions=(1, 2), config_extra=ALL_VERSIONS)
    write_marked(repo, "sticky", "s", versions=(1, 2), config_extra=ALL_VERSIONS + "\nsequence_batching { }")
    shadow = write_marked(repo, "shadow", "h", versions=(1,), config_extra=ALL_VERSIONS)
    write_model(repo, "shadow", (shadow / "config.pbtxt").read_text(), FAILING_PY, version=2)
    with ServerProcess(
        [repo], ["--model-control-mode=explicit"], frontend_workers=int(request.param)
    ) as process:
        yield process


@pytest.fixture
def client(protocol: str, server: ServerProcess) -> Iterator[RepositoryClient]:
    client = connect(protocol, server)
    yield client
    client.close()


def marks(client: RepositoryClient, name: str, count: int, version: str = "") -> Counter[str]:
    return Counter(client.mark(name, version) for _ in range(count))


def weights(**by_version: int) -> str:
    return json.dumps({version.lstrip("v"): weight for version, weight in by_version.items()})


def test_weights_split_requests_naming_no_version_and_leave_explicit_ones(client: RepositoryClient) -> None:
    client.load("canary", parameters={"version_weights": weights(v1=80, v2=20)})
    try:
        seen = marks(client, "canary", 400)
        assert set(seen) == {"c:1", "c:2"}
        # 20% of 400 = 80, standard deviation 8: 40..120 is five deviations either side
        assert 40 <= seen["c:2"] <= 120, seen
        assert marks(client, "canary", 20, "1") == {"c:1": 20}
        assert marks(client, "canary", 20, "2") == {"c:2": 20}
        assert client.is_ready("canary")
        # kept across a load that does not mention them (nothing reloads: same config and files)
        client.load("canary", parameters={"version_weights": weights(v1=1, v2=0)})
        client.load("canary")
        assert marks(client, "canary", 30) == {"c:1": 30}
        # cleared: back to Triton's rule, the highest ready version
        client.load("canary", parameters={"version_weights": ""})
        assert marks(client, "canary", 30) == {"c:2": 30}
    finally:
        client.unload("canary")


def test_weights_are_dropped_when_a_later_load_drops_their_version(client: RepositoryClient) -> None:
    client.load("canary", parameters={"version_weights": weights(v1=1, v2=0)})
    try:
        only_two = json.dumps(
            {
                "backend": "python",
                "version_policy": {"specific": {"versions": [2]}},
                "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [1]}],
                "output": [
                    {"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [1]},
                    {"name": "MARK", "data_type": "TYPE_STRING", "dims": [1]},
                ],
            }
        )
        client.load("canary", config=only_two)
        assert marks(client, "canary", 10) == {"c:2": 10}
    finally:
        client.unload("canary")


BAD_PARAMETERS = [
    ({"version_weights": "{not json"}, "Unable to parse 'version_weights': the value is not valid JSON"),
    ({"version_weights": "[1, 2]"}, "Unable to parse 'version_weights': expected a JSON object"),
    ({"version_weights": weights(v1=0, v2=0)}, "Unable to parse 'version_weights': the weights sum to 0"),
    ({"version_weights": '{"1": -5, "2": 10}'}, "the weight of version 1 must be a non-negative integer"),
    ({"version_weights": '{"1": 1.5}'}, "the weight of version 1 must be a non-negative integer"),
    ({"version_weights": '{"one": 1}'}, "Unable to parse 'version_weights': 'one' is not a version number"),
    (
        {"version_weights": weights(v1=1, v3=1)},
        "'version_weights' version 3 is not among the versions to load",
    ),
    (
        {"mirror": '{"version": 2}'},
        "Unable to parse 'mirror': expected exactly the keys 'version' and 'percent'",
    ),
    ({"mirror": '{"version": 2, "percent": 150}'}, "'percent' must be a number from 0 to 100"),
    (
        {"mirror": '{"version": "2", "percent": 5}'},
        "Unable to parse 'mirror': 'version' must be a version number",
    ),
    ({"mirror": '{"version": 7, "percent": 5}'}, "'mirror' version 7 is not among the versions to load"),
]


@pytest.mark.parametrize(("parameters", "message"), BAD_PARAMETERS)
def test_bad_routing_parameters_are_400_and_change_nothing(
    client: RepositoryClient, server: ServerProcess, parameters: dict[str, Any], message: str
) -> None:
    client.load("canary", parameters={"version_weights": weights(v1=1, v2=0)})
    try:
        status, text = error_of(client.load, "canary", parameters=parameters)
        assert status == "400" and message in text
        raw = RawClient(server.http_url)
        answer = raw.post_json("/v2/repository/models/canary/load", {"parameters": parameters})
        raw.close()
        assert answer.status == 400 and list(answer.json()) == ["error"] and message in answer.error
        assert marks(client, "canary", 10) == {"c:1": 10}
        assert marks(client, "canary", 5, "2") == {"c:2": 5}
    finally:
        client.unload("canary")


def _infer(protocol: str, server: ServerProcess, model: str, **kwargs: Any) -> str:
    module: Any = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    triton = module.InferenceServerClient(url)
    try:
        tensor = module.InferInput("INPUT0", [1], "INT32")
        tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
        result = triton.infer(model, [tensor], **kwargs)
        return bytes(result.as_numpy("MARK").reshape(-1)[0]).decode()
    finally:
        triton.close()


def test_a_sequence_stays_on_one_version_chosen_by_its_correlation_id(
    client: RepositoryClient, server: ServerProcess, protocol: str
) -> None:
    client.load("sticky", parameters={"version_weights": weights(v1=50, v2=50)})
    try:
        chosen: dict[int, str] = {}
        for correlation in range(1, 25):
            answers = {
                _infer(
                    protocol,
                    server,
                    "sticky",
                    sequence_id=correlation,
                    sequence_start=step == 0,
                    sequence_end=step == 2,
                )
                for step in range(3)
            }
            assert len(answers) == 1, (correlation, answers)
            chosen[correlation] = answers.pop()
        assert set(chosen.values()) == {"s:1", "s:2"}
        # the same correlation id gets the same version again (a stable hash, not a random draw)
        again = _infer(protocol, server, "sticky", sequence_id=7, sequence_start=True, sequence_end=True)
        assert again == chosen[7]
    finally:
        client.unload("sticky")


def _statistics(protocol: str, server: ServerProcess, model: str) -> dict[str, dict[str, int]]:
    """Per version: successful and failed request counts from the statistics extension."""
    if protocol == "http":
        http = httpclient.InferenceServerClient(server.http_url)
        document = http.get_inference_statistics(model)
        http.close()
    else:
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        document = grpc.get_inference_statistics(model, as_json=True)
        grpc.close()
    return {
        entry["version"]: {
            "success": int(entry["inference_stats"]["success"].get("count", 0)),
            "fail": int(entry["inference_stats"]["fail"].get("count", 0)),
        }
        for entry in document["model_stats"]
    }


def _metric(server: ServerProcess, name: str, model: str, version: str) -> int:
    """A counter of one version in ``/metrics``, summed over its other labels (failure reasons)."""
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    pattern = rf'^{name}\{{(?=[^}}]*model="{model}")(?=[^}}]*version="{version}")[^}}]*\}} (\S+)$'
    return sum(int(float(value)) for value in re.findall(pattern, text, re.MULTILINE))


def _settled(protocol: str, server: ServerProcess, model: str) -> dict[str, dict[str, int]]:
    """The statistics once background mirror requests stopped adding to them."""
    previous = _statistics(protocol, server, model)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.5)
        current = _statistics(protocol, server, model)
        if current == previous:
            return current
        previous = current
    raise AssertionError("mirror requests kept running")


def test_mirror_copies_a_share_in_the_background_and_answers_from_the_primary(
    client: RepositoryClient, server: ServerProcess, protocol: str
) -> None:
    client.load(
        "shadow", parameters={"default_version": 1, "mirror": json.dumps({"version": 2, "percent": 50})}
    )
    try:
        before = _settled(protocol, server, "shadow")
        assert marks(client, "shadow", 200) == {"h:1": 200}  # the failing shadow never shows
        after = _settled(protocol, server, "shadow")
        assert after["1"]["success"] - before["1"]["success"] == 200
        mirrored = after["2"]["fail"] - before["2"]["fail"]
        # 50% of 200 = 100, standard deviation about 7
        assert 60 <= mirrored <= 140, after
        assert after["2"]["success"] == before["2"]["success"]
        assert _metric(server, "nv_inference_request_failure", "shadow", "2") == after["2"]["fail"]
        assert _metric(server, "nv_inference_request_success", "shadow", "1") == after["1"]["success"]
        # requests naming a version are not mirrored; clearing stops mirroring
        assert marks(client, "shadow", 20, "1") == {"h:1": 20}
        client.load("shadow", parameters={"mirror": ""})
        assert marks(client, "shadow", 40) == {"h:1": 40}
        assert _settled(protocol, server, "shadow")["2"] == after["2"]
    finally:
        client.unload("shadow")


def test_mirror_share_shows_as_the_mirror_versions_successes(
    client: RepositoryClient, server: ServerProcess, protocol: str
) -> None:
    client.load(
        "canary",
        parameters={
            "version_weights": weights(v1=1, v2=0),
            "mirror": json.dumps({"version": 2, "percent": 25}),
        },
    )
    try:
        before = _settled(protocol, server, "canary")
        assert marks(client, "canary", 200) == {"c:1": 200}
        after = _settled(protocol, server, "canary")
        mirrored = after["2"]["success"] - before["2"]["success"]
        # 25% of 200 = 50, standard deviation about 6
        assert 20 <= mirrored <= 80, after
        assert _metric(server, "nv_inference_request_success", "canary", "2") == after["2"]["success"]
    finally:
        client.unload("canary")
