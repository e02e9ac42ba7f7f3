"""Rendering the chart with real Helm (v4, in the helm-python-sdk wheel: no binary, no cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "naiad-operator"
RELEASE, NAMESPACE = "naiad", "naiad-system"


def render_files(values: dict[str, Any]) -> dict[str, str]:
    """Template path -> rendered text (NOTES.txt included), as `helm template` renders them."""
    with helm.Chart.load(str(CHART)) as chart:
        return chart.render(values, name=RELEASE, namespace=NAMESPACE)


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Every object the chart renders with these values (the CRDs included, unless crds.install is off)."""
    objects: list[dict[str, Any]] = []
    for path, text in sorted(render_files(values).items()):
        if path.endswith(".txt"):
            continue
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def chart_meta() -> dict[str, Any]:
    meta: dict[str, Any] = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return meta


def fullname() -> str:
    return f"{RELEASE}-{chart_meta()['name']}"


#: The plain manifests for `kubectl apply` (no Helm): the chart with its defaults, as release
#: "naiad-operator" in namespace "naiad-system", plus that namespace. `make manifests` writes them and
#: test_chart.py checks they are current.
MANIFESTS = ROOT / "deploy" / "naiad-operator.yaml"
PLAIN_RELEASE = "naiad-operator"
INSTALL_ORDER = [
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "Service",
    "Deployment",
    "ServiceMonitor",
]


def plain_manifests() -> str:
    with helm.Chart.load(str(CHART)) as chart:
        # the CRDs stay in crds/ for kubectl (applied first, server-side: they are large)
        files = chart.render({"crds": {"install": False}}, name=PLAIN_RELEASE, namespace=NAMESPACE)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    documents = [yaml.safe_dump(namespace, sort_keys=False).strip()]
    for path, text in sorted(files.items()):
        if not path.endswith(".txt"):
            documents += [d.strip() for d in text.split("\n---\n") if yaml.safe_load(d)]
    # in the order Helm installs them, so that kubectl creates what the Deployment needs first
    documents.sort(key=lambda d: INSTALL_ORDER.index(yaml.safe_load(d)["kind"]))
    header = (
        "# The naiad operator without Helm: kubectl apply --server-side -f crds/ -f deploy/\n"
        "# Rendered from charts/naiad-operator with its default values by `make manifests`; do not edit\n"
        "# (tests/packaging/test_chart.py fails when this file and the chart disagree).\n"
    )
    return header + "".join(f"---\n{d}\n" for d in documents)


def write_manifests() -> None:
    MANIFESTS.parent.mkdir(exist_ok=True)
    MANIFESTS.write_text(plain_manifests())
