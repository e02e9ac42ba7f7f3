"""The chart's RBAC is exactly what the operator uses: not a verb less (it would fail in a cluster), not
a verb more (least privilege). The reference is the operator's own API traffic, recorded while the real
``naiad-operator`` runs a full lifecycle against KMock (``operator_traffic.py``), once watching the whole
cluster and once watching a list of namespaces, the two shapes the chart renders.
"""

from __future__ import annotations

from typing import Any

import pytest
from naiad_operator.k8s import resources

from tests.packaging import operator_traffic
from tests.packaging.chart import NAMESPACE, find, fullname, render
from tests.packaging.operator_traffic import Rule, Traffic

WATCHED = ["default", "prod"]  # the recording's namespace, and one more: each gets its own Role


@pytest.fixture(scope="module")
def clusterwide(tmp_path_factory: pytest.TempPathFactory) -> Traffic:
    return operator_traffic.record([], tmp_path_factory.mktemp("clusterwide"))


@pytest.fixture(scope="module")
def namespaced(tmp_path_factory: pytest.TempPathFactory) -> Traffic:
    return operator_traffic.record([operator_traffic.NS], tmp_path_factory.mktemp("namespaced"))


#: Reads of kinds the operator keeps in its watches (kopf indexes): a pass reads memory and falls back
#: to "get" only for an object the watch has not delivered yet, which a recorded lifecycle may or may
#: not hit. These, and only these, may be granted without being seen.
FALLBACK_GETS: set[Rule] = {
    ("", "configmaps", "get"),
    ("", "services", "get"),
    ("", "persistentvolumeclaims", "get"),
    ("apps", "deployments", "get"),
    ("batch", "jobs", "get"),
    ("autoscaling", "horizontalpodautoscalers", "get"),
    ("policy", "poddisruptionbudgets", "get"),
}


def rules_of(role: dict[str, Any]) -> set[Rule]:
    triples: set[Rule] = set()
    for rule in role["rules"]:
        assert not {"*"} & {*rule["apiGroups"], *rule["resources"], *rule["verbs"]}, f"a wildcard: {rule}"
        assert not rule.get("resourceNames") and not rule.get("nonResourceURLs"), rule
        triples |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return triples


def bound_to_operator(objects: list[dict[str, Any]], binding: dict[str, Any]) -> dict[str, Any]:
    """The role a binding grants the operator's ServiceAccount."""
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": fullname(), "namespace": NAMESPACE}]
    ref = binding["roleRef"]
    assert ref["apiGroup"] == "rbac.authorization.k8s.io"
    namespace = binding["metadata"].get("namespace")
    (role,) = [
        o for o in find(objects, ref["kind"], ref["name"]) if o["metadata"].get("namespace") == namespace
    ]
    return role


def test_recording_reached_every_kind_the_operator_knows(clusterwide: Traffic) -> None:
    """The scenario touched every kind in the operator's table of paths (k8s/resources.py), so a kind
    added there without a scenario step here fails instead of going unchecked."""
    touched = {(group, resource.split("/")[0]) for group, resource, _ in clusterwide.all}
    for (api_version, _), plural in resources.PLURALS.items():
        group = api_version.rpartition("/")[0]
        if (group, plural) == LEASES:  # leader election is opt-in: see test_leader_election_rbac
            continue
        assert (group, plural) in touched, f"the recorded lifecycle never used {plural}"


def test_operator_answers_on_its_liveness_endpoint(clusterwide: Traffic, namespaced: Traffic) -> None:
    """What the chart's probes call (asserted in test_chart.py) answered while the operator worked."""
    assert clusterwide.liveness_ok and namespaced.liveness_ok


def test_clusterwide_rbac_is_the_operators_traffic(clusterwide: Traffic) -> None:
    objects = render({})
    (binding,) = find(objects, "ClusterRoleBinding")
    role = bound_to_operator(objects, binding)
    assert not find(objects, "Role") and not find(objects, "RoleBinding")
    granted = rules_of(role)
    assert clusterwide.all <= granted, f"missing: {sorted(clusterwide.all - granted)}"
    assert granted - clusterwide.all <= FALLBACK_GETS, f"not used: {sorted(granted - clusterwide.all)}"


def test_namespaced_rbac_is_the_operators_traffic(namespaced: Traffic) -> None:
    """A Role per watched namespace with the namespaced rules, and a ClusterRole with only what kopf
    reads cluster-wide (CRDs, Namespaces)."""
    objects = render({"operator": {"watchNamespaces": WATCHED}})
    (cluster_binding,) = find(objects, "ClusterRoleBinding")
    cluster = rules_of(bound_to_operator(objects, cluster_binding))
    assert cluster == namespaced.cluster, (
        f"missing: {sorted(namespaced.cluster - cluster)}; not used: {sorted(cluster - namespaced.cluster)}"
    )
    bindings = find(objects, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == sorted(WATCHED)
    assert sorted(r["metadata"]["namespace"] for r in find(objects, "Role")) == sorted(WATCHED)
    for binding in bindings:
        granted = rules_of(bound_to_operator(objects, binding))
        assert namespaced.namespaced <= granted, f"missing: {sorted(namespaced.namespaced - granted)}"
        assert granted - namespaced.namespaced <= FALLBACK_GETS, (
            f"not used: {sorted(granted - namespaced.namespaced)}"
        )


def test_people_get_aggregated_roles_not_the_operators() -> None:
    """The aggregated edit/view roles cover only our resources and are bound to nobody by the chart."""
    objects = render({})
    operator_roles = {b["roleRef"]["name"] for b in find(objects, "ClusterRoleBinding")}
    aggregated = [o for o in find(objects, "ClusterRole") if o["metadata"]["name"] not in operator_roles]
    assert {o["metadata"]["name"] for o in aggregated} == {f"{fullname()}-edit", f"{fullname()}-view"}
    for role in aggregated:
        assert any(
            k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in role["metadata"]["labels"]
        )
        assert {g for g, _, _ in rules_of(role)} == {"serving.naiad.dev"}
    assert not [
        o
        for o in render({"rbac": {"aggregateToDefaultRoles": False}})
        if o["metadata"]["name"].endswith(("-edit", "-view"))
    ]


def test_traffic_is_read_as_the_api_server_authorizes_it() -> None:
    """The request -> rule mapping itself, on the shapes the operator sends."""
    request = operator_traffic.Request
    traffic = operator_traffic.rules_of(
        [
            request("GET", "/api/v1/namespaces/ml/pods", False, ""),
            request("GET", "/apis/serving.naiad.dev/v1alpha1/inferenceservices", True, ""),
            request("GET", "/apis/apps/v1/namespaces/ml/deployments/vision", False, ""),
            request(
                "PATCH",
                "/apis/apps/v1/namespaces/ml/deployments/vision",
                False,
                "application/apply-patch+yaml",
            ),
            request(
                "PATCH",
                "/apis/serving.naiad.dev/v1alpha1/namespaces/ml/inferenceservices/v/status",
                False,
                "application/merge-patch+json",
            ),
            request("POST", "/api/v1/namespaces/ml/events", False, "application/json"),
            request("DELETE", "/api/v1/namespaces/ml/persistentvolumeclaims/c", False, "application/json"),
            request("GET", "/api/v1/namespaces", True, ""),
            request("GET", "/apis", False, ""),
            request("GET", "/apis/apps/v1", False, ""),
        ]
    )
    assert traffic.namespaced == {
        ("", "pods", "list"),
        ("apps", "deployments", "get"),
        ("apps", "deployments", "patch"),
        ("apps", "deployments", "create"),
        ("serving.naiad.dev", "inferenceservices/status", "patch"),
        ("", "events", "create"),
        ("", "persistentvolumeclaims", "delete"),
    }
    assert traffic.cluster == {
        ("serving.naiad.dev", "inferenceservices", "watch"),
        ("", "namespaces", "watch"),
    }


LEASES = ("coordination.k8s.io", "leases")


def test_leader_election_rbac() -> None:
    """With leader election the operator reads, creates and patches (a JSON patch conditional on the
    resourceVersion) its Lease in the release namespace, and nothing else of leases (k8s/lease.py);
    without it the chart grants nothing on leases."""
    objects = render({"operator": {"leaderElection": {"enabled": True}}, "replicaCount": 2})
    roles = [o for o in objects if o["kind"] == "Role" and o["metadata"]["name"].endswith("-leader")]
    assert [r["metadata"]["namespace"] for r in roles] == [NAMESPACE]
    assert roles[0]["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "patch"]}
    ]
    assert not any(
        "leases" in rule.get("resources", [])
        for o in render({})
        if o["kind"] in ("Role", "ClusterRole")
        for rule in o["rules"]
    )
