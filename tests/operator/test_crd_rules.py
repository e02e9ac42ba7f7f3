"""The CRDs' CEL rules, evaluated (cel-python): what a platform team's first specs get back from
``kubectl apply``. Each rejection case is a spec that cannot work on a real cluster."""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest

from tests.operator import samples
from tests.operator.cel import admit, rules, schema


@pytest.mark.parametrize("plural", ["modelrepositories", "inferenceservices"])
def test_every_rule_compiles(plural: str) -> None:
    env = celpy.Environment()
    found = rules(schema(plural))
    assert len(found) >= 4
    for path, rule, message in found:
        env.compile(rule)  # raises on a syntax error
        assert message, f"{path}: a rule without a message leaves users guessing"


def _repo(**storage: Any) -> dict[str, Any]:
    return samples.repository(storage=storage)


def test_storage_default_is_per_pod_on_read_write_once() -> None:
    """The default binds on a cluster whose only StorageClass is RWO block storage (EBS, PD, Azure Disk)."""
    assert admit("modelrepositories", samples.repository()) == []
    from tests.operator.cel import defaulted

    storage = defaulted(schema("modelrepositories"), samples.repository())["spec"]["storage"]
    assert storage["mode"] == "perPod" and storage["accessModes"] == ["ReadWriteOnce"]


@pytest.mark.parametrize(
    ("storage", "fragment"),
    [
        ({"mode": "shared"}, "needs accessModes [ReadWriteMany]"),
        ({"mode": "shared", "accessModes": ["ReadWriteOnce"]}, "needs accessModes [ReadWriteMany]"),
        (
            {"mode": "shared", "accessModes": ["ReadWriteMany", "ReadWriteOncePod"]},
            "ReadWriteOncePod allows one pod",
        ),
        ({"accessModes": ["ReadOnlyMany"]}, "schema"),  # the sync Job writes the claim
        ({"mode": "nodeLocal"}, "schema"),
    ],
)
def test_impossible_storage_is_refused(storage: dict[str, Any], fragment: str) -> None:
    messages = admit("modelrepositories", _repo(**storage))
    assert any(fragment in m for m in messages), messages


@pytest.mark.parametrize(
    "storage",
    [
        {"mode": "shared", "accessModes": ["ReadWriteMany"]},
        {"mode": "shared", "claimName": "team-nfs"},  # the user's claim: its modes are theirs
        {"mode": "perPod", "accessModes": ["ReadWriteOncePod"]},  # only the sync Job mounts it
        {"mode": "perPod", "accessModes": ["ReadWriteMany"]},
        {"mode": "nodeCache"},  # the claim is the sync Job's; servers mount their node's local volume
    ],
)
def test_storage_that_works_is_admitted(storage: dict[str, Any]) -> None:
    assert admit("modelrepositories", _repo(**storage)) == []


def test_credentials_secret_and_service_account_together() -> None:
    """A ServiceAccount (image pulls, workload identity) and a Secret (S3 keys) may be combined."""
    repo = samples.repository()
    repo["spec"]["source"]["credentials"] = {
        "secretRef": {"name": "s3"},
        "serviceAccountName": "reader",
        "gcsKeySecret": {"name": "gcs", "key": "key.json"},
    }
    assert admit("modelrepositories", repo) == []


def test_ca_bundle_names_exactly_one_source() -> None:
    repo = samples.repository()
    repo["spec"]["source"]["caBundle"] = {}
    assert any("exactly one" in m for m in admit("modelrepositories", repo))
    repo["spec"]["source"]["caBundle"] = {"configMapRef": {"name": "ca", "key": "ca.pem"}}
    assert admit("modelrepositories", repo) == []


def test_sync_template_keeps_operator_names() -> None:
    repo = samples.repository(sync={"template": {"volumes": [{"name": "repository", "emptyDir": {}}]}})
    assert any("belong to the operator" in m for m in admit("modelrepositories", repo))
    repo = samples.repository(
        sync={"template": {"annotations": {"sidecar.istio.io/inject": "false"}, "env": [{"name": "HOME"}]}}
    )
    assert any("HOME" in m for m in admit("modelrepositories", repo))


def _isvc(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(samples.FULL_SERVICE_SPEC)
    for key, value in changes.items():
        spec[key] = {**spec.get(key, {}), **value}
    return {**samples.inference_service(), "spec": spec}


def test_full_service_is_admitted() -> None:
    assert admit("inferenceservices", _isvc()) == []


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"server": {"args": ["--model-control-mode=poll"]}}, "--model-control-mode"),
        ({"server": {"args": ["--load-model", "x"]}}, "--load-model"),
        ({"server": {"env": [{"name": "NAIAD_LOAD_MODEL_ARGS", "value": ""}]}}, "NAIAD_LOAD_MODEL_ARGS"),
        ({"server": {"volumeMounts": [{"name": "x", "mountPath": "/repository"}]}}, "/repository"),
        ({"server": {"gpus": 1, "resources": {"limits": {"nvidia.com/gpu": 2}}}}, "not both"),
        ({"podTemplate": {"volumes": [{"name": "tmp", "emptyDir": {}}]}}, "belong to the operator"),
        ({"podTemplate": {"containers": [{"name": "server", "image": "x"}]}}, "container name server"),
        ({"podTemplate": {"initContainers": [{"name": "repository", "image": "x"}]}}, "repository"),
        ({"podTemplate": {"shmSize": "lots"}}, "schema"),
    ],
)
def test_operator_owned_names_are_refused(changes: dict[str, Any], fragment: str) -> None:
    messages = admit("inferenceservices", _isvc(**changes))
    assert any(fragment in m for m in messages), messages


def test_mig_profile_through_resources_is_admitted() -> None:
    spec = _isvc(server={"gpus": 0, "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}})
    assert admit("inferenceservices", spec) == []
    assert admit("inferenceservices", _isvc(server={"args": ["--log-verbose=1", "--grpc-port-x"]})) == []


@pytest.mark.parametrize(
    "args",
    [
        ["--model-control-mode=poll"],
        ["--model-control-mode", "poll"],
        ["--model-control=poll"],  # argparse (and tritonserver's getopt_long) take any unambiguous prefix
        ["--model-store=/elsewhere"],  # Triton's other name of --model-repository
        ["--model-repo", "/elsewhere"],
        ["--log-verbose=1", "--strict-readiness=false"],
        ["--http-port=9000"],
        ["--grpc-port", "9001"],
        ["--metrics-po=9002"],
        ["--http-address=127.0.0.1"],  # the kubelet's probes and the operator could not reach the pod
        ["--allow-http=false"],
        ["--load-model=other"],
        ["--peers-file=/tmp/mine.json"],  # placement: the operator writes which pod holds which model
        ["--peers", "/tmp/mine.json"],
    ],
)
def test_flags_the_operator_owns_are_refused_in_every_spelling(args: list[str]) -> None:
    messages = admit("inferenceservices", _isvc(server={"args": args}))
    assert any("server.args must not set" in m for m in messages), messages


@pytest.mark.parametrize(
    "args",
    [
        ["--log-verbose=1", "--grpc-port-x"],
        ["--model-load-thread-count=4", "--metrics-config=summary_latencies=true"],
        ["--http-header-forward-pattern=x-.*", "--grpc-address=0.0.0.0", "--allow-grpc=false"],
        ["--frontend-workers=3", "--exit-timeout-secs=10", "--repository-poll-secs", "5"],
        ["--http-max-input-size=1048576", "--log-format", "ISO8601"],
    ],
)
def test_other_server_flags_are_admitted(args: list[str]) -> None:
    assert admit("inferenceservices", _isvc(server={"args": args})) == []


@pytest.mark.parametrize("args", [["--min-residency-secs=2"], ["--min-residency", "2"], ["--min=2"], ["--mi=2"]])
def test_min_residency_in_the_field_and_in_args_together_is_refused(args: list[str]) -> None:
    messages = admit("inferenceservices", _isvc(server={"minResidencySeconds": 2, "args": args}))
    assert any("set one" in m for m in messages), messages


@pytest.mark.parametrize(
    "server",
    [
        {"minResidencySeconds": 2},
        {"minResidencySeconds": 0.5, "args": ["--model-memory-budget=2Gi", "--model-load-thread-count=2"]},
        {"args": ["--min-residency-secs=2"]},
    ],
)
def test_min_residency_in_one_place_is_admitted(server: dict[str, Any]) -> None:
    assert admit("inferenceservices", _isvc(server=server)) == []


def test_negative_min_residency_is_refused() -> None:
    messages = admit("inferenceservices", _isvc(server={"minResidencySeconds": -1}))
    assert messages, "a negative residency must not be admitted"


@pytest.mark.parametrize("args", [["--eviction-policy=lru"], ["--eviction-policy", "gdsf"], ["--evict=lru"], ["--ev=lru"]])
def test_eviction_policy_in_the_field_and_in_args_together_is_refused(args: list[str]) -> None:
    messages = admit("inferenceservices", _isvc(server={"evictionPolicy": "gdsf", "args": args}))
    assert any("server.evictionPolicy and --eviction-policy" in m for m in messages), messages


@pytest.mark.parametrize(
    "server",
    [
        {"evictionPolicy": "gdsf"},
        {"evictionPolicy": "lru", "minResidencySeconds": 2, "args": ["--exit-timeout-secs=10"]},
        {"args": ["--eviction-policy=gdsf"]},
    ],
)
def test_eviction_policy_in_one_place_is_admitted(server: dict[str, Any]) -> None:
    assert admit("inferenceservices", _isvc(server=server)) == []


def test_an_unknown_eviction_policy_is_refused() -> None:
    messages = admit("inferenceservices", _isvc(server={"evictionPolicy": "lfu"}))
    assert messages, "only the server's policies may be admitted"


@pytest.mark.parametrize(
    "placement",
    [
        "all",
        "onDemand",
        {"copies": 1},
        {"copies": 3},
        {"copies": 1, "maxCopies": 3, "targetRequestsPerSecond": 50},
        {"copies": 2, "maxCopies": 2, "targetRequestsPerSecond": 0.5, "scaleDownDelaySeconds": 0},
    ],
)
def test_model_placements_are_admitted(placement: Any) -> None:
    models = [{"name": "resnet", "placement": placement}]
    assert admit("inferenceservices", samples.inference_service(models=models)) == []


@pytest.mark.parametrize("placement", ["some", {"copies": 0}, {"copies": "2"}, {"copies": 1, "x": 1}, 3])
def test_impossible_placements_are_refused(placement: Any) -> None:
    models = [{"name": "resnet", "placement": placement}]
    messages = admit("inferenceservices", samples.inference_service(models=models))
    assert any("placement is" in m for m in messages), messages


@pytest.mark.parametrize(
    ("placement", "fragment"),
    [
        ({"copies": 2, "maxCopies": 1, "targetRequestsPerSecond": 5}, "maxCopies is an integer no smaller"),
        ({"copies": 1, "maxCopies": "3", "targetRequestsPerSecond": 5}, "maxCopies is an integer no smaller"),
        ({"copies": 1, "maxCopies": 3}, "go together"),  # grow by what?
        ({"copies": 1, "targetRequestsPerSecond": 5}, "go together"),  # grow up to what?
        ({"copies": 1, "maxCopies": 3, "targetRequestsPerSecond": 0}, "a number above 0"),
        ({"copies": 1, "maxCopies": 3, "targetRequestsPerSecond": "5"}, "a number above 0"),
        ({"copies": 1, "maxCopies": 3, "targetRequestsPerSecond": 5, "scaleDownDelaySeconds": -1}, "seconds"),
        ({"copies": 1, "scaleDownDelaySeconds": 30}, "needs maxCopies"),
        ({"copies": 1, "maxCopies": 3, "targetRequestsPerSecond": 5, "minCopies": 1}, "placement is"),
    ],
)
def test_impossible_scaling_placements_are_refused(placement: Any, fragment: str) -> None:
    models = [{"name": "resnet", "placement": placement}]
    messages = admit("inferenceservices", samples.inference_service(models=models))
    assert any(fragment in m for m in messages), messages
