"""examples/kubernetes/ and the README's manifests: valid against our CRDs' schemas, read by the operator's
typed API as written, and consistent with what the operator and the server actually do.

The CRD schemas are checked as ``kubectl apply`` checks them (strict field validation, the default since
Kubernetes 1.27: an unknown field is an error, not silently pruned); CEL rules run only in a real API
server (e2e covers them). Built-in kinds go through kubernetes-validate.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from naiad_operator.api.inferenceservice import InferenceServiceSpec
from naiad_operator.api.modelrepository import ModelRepositorySpec
from naiad_operator.reconcile import traffic

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "kubernetes"
SPECS = {"ModelRepository": ModelRepositorySpec, "InferenceService": InferenceServiceSpec}


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with unknown fields refused wherever the API server would report them."""
    schema = copy.deepcopy(schema)

    def visit(node: dict[str, Any], path: str) -> None:
        props = node.get("properties")
        if isinstance(props, dict):
            if "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for key, sub in props.items():
                if path == "" and key == "metadata":
                    continue  # ObjectMeta: validated by the API server's own schema, not the CRD's
                visit(sub, f"{path}.{key}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                visit(node[key], f"{path}[]")

    visit(schema, "")
    return schema


def _validators() -> dict[tuple[str, str], jsonschema.Draft7Validator]:
    validators = {}
    for path in (ROOT / "crds").glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        for version in crd["spec"]["versions"]:
            key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
            validators[key] = jsonschema.Draft7Validator(_strict(version["schema"]["openAPIV3Schema"]))
    return validators


VALIDATORS = _validators()


def _manifests() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        if path.name in ("kustomization.yaml", "prometheus-adapter-values.yaml"):
            continue  # not Kubernetes objects: checked below
        found += [(f"{path.name}#{i}", d) for i, d in enumerate(docs)]
    return found


def _readme_manifests() -> list[tuple[str, dict[str, Any]]]:
    """Our custom resources in README.md's ```yaml blocks."""
    found = []
    blocks = re.findall(r"```ya?ml\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    for n, block in enumerate(blocks):
        for doc in yaml.safe_load_all(block):
            if isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith("serving.naiad.dev/"):
                found.append((f"README.md block {n}", doc))
    return found


def _check(obj: dict[str, Any]) -> None:
    key = (obj["apiVersion"], obj["kind"])
    if key in VALIDATORS:
        errors = sorted(VALIDATORS[key].iter_errors(obj), key=lambda e: list(e.path))
        assert not errors, "; ".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors)
        SPECS[obj["kind"]].model_validate(obj["spec"])  # what the operator reads
    else:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize(("where", "obj"), _manifests(), ids=[w for w, _ in _manifests()])
def test_example_manifests_are_valid(where: str, obj: dict[str, Any]) -> None:
    _check(obj)


def test_examples_cover_both_custom_resources() -> None:
    kinds = {obj["kind"] for _, obj in _manifests()}
    assert {"ModelRepository", "InferenceService"} <= kinds


@pytest.mark.parametrize(("where", "obj"), _readme_manifests() or [("none", {})], ids=lambda x: str(x)[:40])
def test_readme_manifests_are_valid(where: str, obj: dict[str, Any]) -> None:
    if not obj:
        pytest.skip("README.md shows no custom resource")
    _check(obj)


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        ({"spec": {"replica": 2}}, "Additional properties"),  # a typo of replicas
        ({"spec": {"models": []}}, "should be non-empty"),
        ({"spec": {"autoscaling": {"maxReplicas": 3, "metric": "GPU"}}}, "is not one of"),
        ({"spec": {"models": [{"name": "a", "versionPolicy": {"newest": 1}}]}}, "Additional properties"),
    ],
)
def test_strict_validation_catches_mistakes(mutation: dict[str, Any], message: str) -> None:
    """The check above would refuse what kubectl refuses (proof that it is not a rubber stamp)."""
    obj = yaml.safe_load((EXAMPLES / "inferenceservice.yaml").read_text())
    obj["spec"].update(mutation["spec"])
    with pytest.raises(AssertionError, match=message):
        _check(obj)


def test_example_models_exist_in_the_example_repository() -> None:
    """The examples say to upload examples/model_repository: the models they serve are in it."""
    available = {p.name for p in (ROOT / "examples" / "model_repository").iterdir() if p.is_dir()}
    for _, obj in _manifests():
        if obj["kind"] == "InferenceService":
            assert {m["name"] for m in obj["spec"]["models"]} <= available


def test_kustomization_lists_existing_manifests() -> None:
    kustomization = yaml.safe_load((EXAMPLES / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    for resource in kustomization["resources"]:
        assert (EXAMPLES / resource).is_file(), resource


def test_prometheus_adapter_rule_serves_the_metric_the_operators_hpa_reads() -> None:
    """The adapter's rule names the metric exactly as traffic.desired_hpa asks for it, per pod, and reads
    counters the server exports (names checked against the server's metric definitions)."""
    values = yaml.safe_load((EXAMPLES / "prometheus-adapter-values.yaml").read_text())
    (rule,) = values["rules"]["custom"]
    assert rule["name"]["as"] == traffic.QUEUE_TIME_METRIC
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    metrics_source = "\n".join(p.read_text() for p in (ROOT / "server" / "naiad" / "metrics").glob("*.py"))
    used = set(re.findall(r"\bnv_[a-z_]+", rule["seriesQuery"] + rule["metricsQuery"]))
    assert used == {"nv_inference_queue_duration_us", "nv_inference_request_success"}
    for metric in used:
        assert f'"{metric}"' in metrics_source, f"the server exports no {metric}"
    hpa = traffic.desired_hpa(
        "vision",
        "ml",
        {"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"},
        InferenceServiceSpec.model_validate(
            yaml.safe_load((EXAMPLES / "inferenceservice-gpu.yaml").read_text())["spec"]
        ),
    )
    assert hpa is not None
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == rule["name"]["as"]
