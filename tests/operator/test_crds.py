"""The CRDs: structural schemas, what admission accepts and rejects, defaults that match the typed API.

A real API server is not available here, so the OpenAPI schema is checked with jsonschema (CEL rules
only run in a real API server; e2e covers them) and defaulting is done the way the API server does it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from naiad_operator.api.inferenceservice import InferenceServiceSpec, InferenceServiceStatus, ModelStatus
from naiad_operator.api.modelrepository import ModelRepositorySpec, ModelRepositoryStatus

from tests.operator import samples

CRDS = Path(__file__).resolve().parents[2] / "crds"


def _crd(plural: str) -> dict[str, Any]:
    return yaml.safe_load((CRDS / f"{plural}.serving.naiad.dev.yaml").read_text())


def _schema(plural: str) -> dict[str, Any]:
    return _crd(plural)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _defaulted(schema: dict[str, Any], value: Any) -> Any:
    """Apply ``default``s as the API server does: for absent properties of present objects."""
    value = copy.deepcopy(value)
    if isinstance(value, dict) and "properties" in schema:
        for key, sub in schema["properties"].items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = _defaulted(sub, value[key])
    elif isinstance(value, list) and "items" in schema:
        value = [_defaulted(schema["items"], v) for v in value]
    return value


def _walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    nodes = [(path, schema)]
    for key, sub in (schema.get("properties") or {}).items():
        nodes += _walk(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        nodes += _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        nodes += _walk(schema["additionalProperties"], f"{path}{{}}")
    return nodes


@pytest.mark.parametrize("plural", ["modelrepositories", "inferenceservices"])
def test_schema_is_structural(plural: str) -> None:
    """Every node has a type (or is int-or-string / preserve-unknown), every object says what it holds."""
    for path, node in _walk(_schema(plural)):
        assert (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")  # any JSON value (models[].placement)
        ), path
        if node.get("type") == "object" and path != ".metadata":
            assert (
                "properties" in node
                or "additionalProperties" in node
                or node.get("x-kubernetes-preserve-unknown-fields")
            ), f"{path} is an object with no fields (pruning would drop them)"


def test_crd_metadata() -> None:
    isvc, repo = _crd("inferenceservices"), _crd("modelrepositories")
    for crd in (isvc, repo):
        assert crd["spec"]["group"] == "serving.naiad.dev"
        version = crd["spec"]["versions"][0]
        assert version["name"] == "v1alpha1" and version["storage"] and version["served"]
        assert "status" in version["subresources"]
        assert crd["spec"]["names"]["categories"] == ["naiad"]
    assert isvc["spec"]["names"]["shortNames"] == ["nisvc"]  # not "isvc": that is KServe's
    assert repo["spec"]["names"]["shortNames"] == ["mrepo"]
    scale = isvc["spec"]["versions"][0]["subresources"]["scale"]
    assert scale == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    columns = {c["name"]: c["jsonPath"] for c in isvc["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Servable"] == '.status.conditions[?(@.type=="Servable")].status'


@pytest.mark.parametrize(
    ("plural", "obj"),
    [
        ("modelrepositories", samples.repository()),
        ("modelrepositories", {**samples.repository(), "spec": samples.FULL_REPOSITORY_SPEC}),
        ("inferenceservices", samples.inference_service()),
        ("inferenceservices", {**samples.inference_service(), "spec": samples.FULL_SERVICE_SPEC}),
    ],
)
def test_valid_objects_are_admitted(plural: str, obj: dict[str, Any]) -> None:
    jsonschema.validate(_defaulted(_schema(plural), obj), _schema(plural))


@pytest.mark.parametrize(
    ("plural", "spec", "error"),
    [
        ("modelrepositories", {"source": {"uri": "http://bucket/x"}}, "does not match"),
        ("modelrepositories", {"source": {}}, "'uri' is a required property"),
        ("modelrepositories", {"source": {"uri": "s3://b"}, "retentionPolicy": "Keep"}, "is not one of"),
        (
            "modelrepositories",
            {"source": {"uri": "s3://b"}, "sync": {"interval": "ten minutes"}},
            "does not match",
        ),
        (
            "modelrepositories",
            {"source": {"uri": "s3://b"}, "sync": {"keepSnapshots": 0}},
            "less than the minimum",
        ),
        ("inferenceservices", {"repository": {"name": "r"}, "models": []}, "should be non-empty"),
        ("inferenceservices", {"repository": {"name": "r"}, "models": [{"name": "a b"}]}, "does not match"),
        (
            "inferenceservices",
            {"repository": {"name": "r"}, "models": [{"name": "a"}], "replicas": -1},
            "less than the minimum",
        ),
        (
            "inferenceservices",
            {"repository": {"name": "r"}, "models": [{"name": "a"}], "autoscaling": {}},
            "'maxReplicas' is a required property",
        ),
        (
            "inferenceservices",
            {
                "repository": {"name": "r"},
                "models": [{"name": "a"}],
                "autoscaling": {"maxReplicas": 2, "metric": "GPU"},
            },
            "is not one of",
        ),
        ("inferenceservices", {"models": [{"name": "a"}]}, "'repository' is a required property"),
    ],
)
def test_bad_specs_are_rejected(plural: str, spec: dict[str, Any], error: str) -> None:
    obj = {"apiVersion": "serving.naiad.dev/v1alpha1", "kind": "X", "metadata": {"name": "x"}, "spec": spec}
    with pytest.raises(jsonschema.ValidationError, match=error):
        jsonschema.validate(obj, _schema(plural))


@pytest.mark.parametrize(
    ("plural", "spec", "model"),
    [
        ("modelrepositories", samples.repository()["spec"], ModelRepositorySpec),
        ("modelrepositories", samples.FULL_REPOSITORY_SPEC, ModelRepositorySpec),
        ("inferenceservices", samples.inference_service()["spec"], InferenceServiceSpec),
        ("inferenceservices", samples.FULL_SERVICE_SPEC, InferenceServiceSpec),
    ],
)
def test_typed_defaults_match_crd_defaults(plural: str, spec: dict[str, Any], model: Any) -> None:
    """The operator reads a spec the same whether or not the API server filled in defaults (the test
    emulator does not): every CRD default is also the typed model's default."""
    defaulted = _defaulted(_schema(plural)["properties"]["spec"], spec)
    assert model.model_validate(defaulted) == model.model_validate(spec)


def test_typed_status_fits_the_status_schema() -> None:
    """What the operator writes into status is what the CRD keeps (nothing pruned, nothing rejected)."""
    isvc_status = InferenceServiceStatus(
        replicas=2,
        selector="a=b",
        models=[
            ModelStatus(
                name="m", active_versions=[1], content_hashes={1: "sha256:ab"}, blocked_hashes={2: "x"}
            )
        ],
    )
    jsonschema.validate(isvc_status.dump(), _schema("inferenceservices")["properties"]["status"])
    repo_status = ModelRepositoryStatus.model_validate(
        {
            "phase": "Ready",
            "snapshot": {"current": "sha256:1", "available": ["sha256:1"]},
            "lastSync": {"result": "Succeeded", "objectsCopied": 3},
            "models": [{"name": "m", "versions": [{"version": 1, "contentHash": "sha256:ab"}]}],
        }
    )
    jsonschema.validate(repo_status.dump(), _schema("modelrepositories")["properties"]["status"])
    status_fields = set(_schema("inferenceservices")["properties"]["status"]["properties"])
    assert set(InferenceServiceStatus().dump()) <= status_fields
