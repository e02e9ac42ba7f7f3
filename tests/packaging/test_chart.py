"""The Helm chart, rendered by real Helm v4 (helm-python-sdk) for default and non-default values.

Every rendered object is validated offline against Kubernetes' own schemas (kubernetes-validate, strict:
unknown fields fail) for the oldest and newest Kubernetes the chart supports; the values schema rejects
bad values; the values are documented key by key; the CRDs are the repository's, byte for byte; the
Deployment's settings are the operator's settings; the ServiceMonitor selects the Services the operator
renders. RBAC is checked against the operator's recorded API traffic in test_rbac.py.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from naiad_operator.reconcile import traffic
from naiad_operator.settings import OperatorSettings

from tests.packaging.chart import (
    CHART,
    MANIFESTS,
    NAMESPACE,
    ROOT,
    chart_meta,
    find,
    fullname,
    plain_manifests,
    render,
    render_files,
)

#: The Kubernetes versions the chart is validated for: Chart.yaml's kubeVersion floor and the newest.
KUBE_VERSIONS = ("1.27.0", kubernetes_validate.latest_version())
DIGEST = "sha256:" + "ab" * 32

VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "namespaced": {
        "operator": {
            "watchNamespaces": ["ml", "prod"],
            "serverImage": {"registry": "registry.example.com/", "variant": "cpu", "tag": ""},
            "verbose": True,
            "loadTimeout": 1800,
            "healthPort": 9090,
        },
        "image": {"registry": "registry.example.com", "digest": DIGEST, "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "regcred"}],
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}, "scrapeTimeout": "10s"},
        "commonLabels": {"team": "ml-platform"},
        "commonAnnotations": {"owner": "ml-platform@example.com"},
        "podLabels": {"sidecar.istio.io/inject": "false"},
        "podAnnotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"},
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "preference": {
                            "matchExpressions": [{"key": "node-role", "operator": "In", "values": ["system"]}]
                        },
                    }
                ]
            }
        },
        "priorityClassName": "system-cluster-critical",
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}},
        "fullnameOverride": "naiad-operator",
    },
    "bring-your-own": {
        "serviceAccount": {"create": False, "name": "ops"},
        "rbac": {"create": False},
        "livenessProbe": {"enabled": False},
        "readinessProbe": {"enabled": False},
        "image": {"tag": "0.1.0-rc1"},
    },
}


def _deployment(values: dict[str, Any]) -> dict[str, Any]:
    (deployment,) = find(render(values), "Deployment")
    return deployment


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_chart_lints_clean() -> None:
    """helm lint --strict: no warning, no error (only Helm's "icon is recommended" notice)."""
    for values in VALUE_SETS.values():
        result = helm.lint(str(CHART), values, strict=True)
        assert not result["errors"], result
        assert all(m["severity"] <= 1 for m in result["messages"]), result["messages"]


def test_crds_are_the_repositorys() -> None:
    """The chart renders the repository's CRDs (files/crds/ byte-identical to crds/) as templates, so
    helm upgrade updates them, kept on uninstall; only labels and that annotation are added."""
    ours = {p.name: p.read_bytes() for p in (ROOT / "crds").glob("*.yaml")}
    charts = {p.name: p.read_bytes() for p in (CHART / "files" / "crds").glob("*.yaml")}
    assert ours and charts.keys() == ours.keys()
    for name, content in ours.items():
        assert charts[name] == content, (
            f"charts/naiad-operator/files/crds/{name} differs: run `make manifests`"
        )
    rendered = {o["metadata"]["name"]: o for o in find(render({}), "CustomResourceDefinition")}
    assert rendered.keys() == {n.removesuffix(".yaml") for n in ours}
    for name, content in ours.items():
        crd = rendered[name.removesuffix(".yaml")]
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        original = yaml.safe_load(content)
        assert crd["spec"] == original["spec"]
    assert not find(render({"crds": {"install": False}}), "CustomResourceDefinition")
    assert (
        "annotations"
        not in find(render({"crds": {"keep": False}}), "CustomResourceDefinition")[0]["metadata"]
    )


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values_name", list(VALUE_SETS))
def test_rendered_objects_are_valid_kubernetes(values_name: str, kube_version: str) -> None:
    objects = render(VALUE_SETS[values_name])
    assert objects
    meta = chart_meta()
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == f"{meta['name']}-{meta['version']}"
        if obj["kind"] == "ServiceMonitor":  # not a built-in kind: checked in its own test
            continue
        kubernetes_validate.validate(obj, kube_version, strict=True)


def test_plain_manifests_are_the_chart_rendered() -> None:
    """deploy/naiad-operator.yaml (for kubectl apply without Helm) is current and valid."""
    assert MANIFESTS.read_text() == plain_manifests(), "deploy/ is stale: run `make manifests`"
    objects = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d]
    assert [o["kind"] for o in objects][:2] == ["Namespace", "ServiceAccount"]
    for obj in objects:
        kubernetes_validate.validate(obj, KUBE_VERSIONS[-1], strict=True)
        assert obj["metadata"].get("namespace", NAMESPACE) == NAMESPACE


def test_app_version_is_the_projects() -> None:
    """The chart deploys the images `make images` tags: naiad/server:<version>[-cpu], naiad/operator:<version>."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart_meta()["appVersion"] == project["version"]


def test_kube_version_floor_is_the_validated_one() -> None:
    assert chart_meta()["kubeVersion"] == f">={KUBE_VERSIONS[0]}-0"


def test_deployment_runs_one_restricted_operator() -> None:
    deployment = _deployment({})
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert container["image"] == f"naiad/operator:{chart_meta()['appVersion']}"
    assert pod["serviceAccountName"] == fullname()


@pytest.mark.parametrize("values_name", ["default", "namespaced"])
def test_probes_call_the_liveness_endpoint_the_operator_serves(values_name: str) -> None:
    values = VALUE_SETS[values_name]
    port = values.get("operator", {}).get("healthPort", 8080)
    (container,) = _deployment(values)["spec"]["template"]["spec"]["containers"]
    assert f"--liveness=http://0.0.0.0:{port}/healthz" in container["args"]
    assert container["ports"][0] == {"name": "health", "containerPort": port, "protocol": "TCP"}
    assert container["ports"][1:] == [{"name": "metrics", "containerPort": 8081, "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert ("--verbose" in container["args"]) == bool(values.get("operator", {}).get("verbose"))


def test_probes_can_be_switched_off() -> None:
    (container,) = _deployment(VALUE_SETS["bring-your-own"])["spec"]["template"]["spec"]["containers"]
    assert "livenessProbe" not in container and "readinessProbe" not in container


@pytest.mark.parametrize("values_name", ["default", "namespaced"])
def test_environment_is_the_operators_settings(values_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One variable per OperatorSettings field, and the operator parses every value the chart writes."""
    (container,) = _deployment(VALUE_SETS[values_name])["spec"]["template"]["spec"]["containers"]
    env = {k: v for k, v in _env(container).items() if k.startswith("NAIAD_OPERATOR_")}
    assert set(env) == {f"NAIAD_OPERATOR_{f.upper()}" for f in OperatorSettings.model_fields}
    for key in list(env):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = OperatorSettings()
    operator = VALUE_SETS[values_name].get("operator", {})
    assert settings.namespaces == operator.get("watchNamespaces", [])
    assert settings.load_timeout == operator.get("loadTimeout", 600)
    assert settings.field_manager == "naiad-operator"


def test_extra_env_is_appended() -> None:
    (container,) = _deployment(VALUE_SETS["namespaced"])["spec"]["template"]["spec"]["containers"]
    assert container["env"][-1] == {"name": "HTTPS_PROXY", "value": "http://proxy:3128"}


@pytest.mark.parametrize(
    ("server_image", "expected"),
    [
        ({}, "naiad/server:{app}"),
        ({"variant": "cpu"}, "naiad/server:{app}-cpu"),
        ({"tag": "1.2.3", "variant": "cpu"}, "naiad/server:1.2.3"),
        ({"registry": "ghcr.io/acme/", "repository": "naiad-server"}, "ghcr.io/acme/naiad-server:{app}"),
        ({"tag": "1.2.3", "digest": DIGEST}, f"naiad/server@{DIGEST}"),
    ],
)
def test_server_image_for_services_that_name_none(server_image: dict[str, str], expected: str) -> None:
    """Never the operator's built-in `naiad/server:latest`: the chart pins the release's image."""
    (container,) = _deployment({"operator": {"serverImage": server_image}})["spec"]["template"]["spec"][
        "containers"
    ]
    assert _env(container)["NAIAD_OPERATOR_SERVER_IMAGE"] == expected.format(app=chart_meta()["appVersion"])


def test_operator_image_digest_wins() -> None:
    (container,) = _deployment(VALUE_SETS["namespaced"])["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"registry.example.com/naiad/operator@{DIGEST}"


def test_servicemonitor_selects_the_services_the_operator_renders() -> None:
    service = traffic.desired_service(
        "vision", "ml", {"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"}
    )
    ports = {p["name"] for p in service["spec"]["ports"]}
    for values_name, namespaces in (("default", None), ("namespaced", ["ml", "prod"])):
        values = {**VALUE_SETS[values_name], "serviceMonitor": {"enabled": True}}
        (monitor,) = [
            m for m in find(render(values), "ServiceMonitor") if m["metadata"]["name"].endswith("-servers")
        ]
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["namespace"] == NAMESPACE
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert selector.items() <= service["metadata"]["labels"].items()
        assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"] and "metrics" in ports
        expected = {"matchNames": namespaces} if namespaces else {"any": True}
        assert monitor["spec"]["namespaceSelector"] == expected
    assert not find(render({}), "ServiceMonitor")  # off by default: it needs the Prometheus Operator's CRD


def test_bring_your_own_account_renders_no_rbac() -> None:
    objects = render(VALUE_SETS["bring-your-own"])
    assert {o["kind"] for o in objects} == {"Deployment", "Service", "CustomResourceDefinition"}
    assert find(objects, "Deployment")[0]["spec"]["template"]["spec"]["serviceAccountName"] == "ops"


# ---- values: documented, typed, validated --------------------------------------------------------------


def _leaves(values: dict[str, Any], prefix: str = "") -> set[str]:
    paths: set[str] = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            paths |= _leaves(value, f"{path}.") | {path}
        else:
            paths.add(path)
    return paths


def test_values_are_documented_and_typed() -> None:
    """Every key has a `## @param` line (itself or a parent documented whole), every @param names a real
    key, and values.schema.json types each of them."""
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    documented = re.findall(r"^\s*## @param (\S+) \S", text, re.MULTILINE)
    assert len(documented) == len(set(documented)), "a key is documented twice"
    keys = _leaves(values)
    assert set(documented) <= keys, set(documented) - keys
    for key in keys:
        parts = key.split(".")
        assert any(".".join(parts[:n]) in documented for n in range(1, len(parts) + 1)) or any(
            d.startswith(f"{key}.") for d in documented
        ), f"values.yaml: {key} has no ## @param"
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    for key in documented:
        node = schema
        for part in key.split("."):
            assert part in node.get("properties", {}), f"values.schema.json has no {key}"
            node = node["properties"][part]
        assert "type" in node, f"values.schema.json: {key} has no type"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"operator": {"serverImage": {"variant": "tpu"}}}, "/operator/serverImage/variant"),
        ({"operator": {"watchNamespaces": ["Not_A_Namespace"]}}, "/operator/watchNamespaces/0"),
        ({"operator": {"watchNamespaces": "ml"}}, "/operator/watchNamespaces"),
        ({"operator": {"reconcileInterval": 0}}, "/operator/reconcileInterval"),
        ({"operator": {"apiRetries": 0}}, "/operator/apiRetries"),
        ({"operator": {"healthPort": 80}}, "/operator/healthPort"),
        ({"operator": {"reconcileIntervall": 30}}, "reconcileIntervall"),  # a typo is not silently ignored
        ({"replicaCount": 0}, "/replicaCount"),
        ({"image": {"digest": "latest"}}, "/image/digest"),
        ({"image": {"repository": ""}}, "/image/repository"),
        ({"rbac": {"create": "yes"}}, "/rbac/create"),
        ({"serviceMonitor": {"interval": "often"}}, "/serviceMonitor/interval"),
        ({"imagePullSecrets": ["regcred"]}, "/imagePullSecrets/0"),
    ],
)
def test_values_schema_rejects(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(message)):
        render(values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"serviceAccount": {"create": False}}, "serviceAccount.name"),
        ({"operator": {"watchNamespaces": ["ml", "ml"]}}, "lists a namespace twice"),
        ({"operator": {"loadTimeout": 5, "serverTimeout": 10}}, "operator.loadTimeout"),
        ({"replicaCount": 2}, "need operator.leaderElection.enabled"),  # without a Lease all would act
    ],
)
def test_cross_field_checks_fail_the_render(values: dict[str, Any], message: str) -> None:
    """What a schema cannot say fails the render (so `helm template` in a GitOps tool fails too)."""
    with pytest.raises(helm.HelmRenderError, match=r"VALUES VALIDATION:\n.*" + re.escape(message)):
        render(values)


def test_notes() -> None:
    notes = render_files({})["naiad-operator/templates/NOTES.txt"]
    assert "watches the whole cluster" in notes and "WARNING" not in notes
    assert f"deployment/{fullname()}" in notes
    namespaced = render_files(VALUE_SETS["namespaced"])["naiad-operator/templates/NOTES.txt"]
    assert "watches the namespaces ml, prod" in namespaced and "-n ml apply" in namespaced
    assert (
        "rbac.create is false"
        in render_files(VALUE_SETS["bring-your-own"])["naiad-operator/templates/NOTES.txt"]
    )
    rolling = render_files({"image": {"tag": "latest"}})["naiad-operator/templates/NOTES.txt"]
    assert "rolling image tag" in rolling


def test_replicas_with_leader_election_roll_one_at_a_time() -> None:
    """Standbys wait for the Lease, so the Deployment may roll (one pod down at a time); alone, the one
    replica is replaced (Recreate), so two operators never act at once."""
    values = {"operator": {"leaderElection": {"enabled": True}}, "replicaCount": 2}
    deployment = _deployment(values)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert _env(container)["NAIAD_OPERATOR_LEADER_ELECTION"] == "true"
    assert _env(container)["NAIAD_OPERATOR_LEADER_NAMESPACE"] == NAMESPACE
    assert _deployment({})["spec"]["strategy"] == {"type": "Recreate"}
