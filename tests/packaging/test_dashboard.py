"""The operator's /metrics in the chart (Service, ServiceMonitor) and the Grafana dashboard: every
series a panel queries is one the operator or the server actually exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from naiad_operator.metrics import Metrics

from tests.packaging.chart import CHART, find, render

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = CHART / "files" / "dashboards" / "naiad.json"


def _exported() -> set[str]:
    """Series names: the operator's registry (histogram and counter suffixes included) and every nv_*
    name in the server's metrics sources."""
    names: set[str] = set()
    for family in Metrics().registry.collect():
        names.add(family.name)
        names |= {sample.name for sample in family.samples}
        if family.type == "histogram":
            names |= {f"{family.name}_{s}" for s in ("bucket", "sum", "count")}
        if family.type == "counter":
            names.add(f"{family.name}_total")
    for path in (ROOT / "server" / "naiad").rglob("*.py"):
        names |= set(re.findall(r'"(nv_[a-z_]+)"', path.read_text()))
    return names


def test_every_panel_queries_exported_series() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = _exported()
    queried = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            queried |= set(re.findall(r"\b((?:nv|naiad_operator)_[a-z_]+)", target["expr"]))
    assert queried and queried <= exported, sorted(queried - exported)
    assert {"naiad_operator_blocked_models", "naiad_operator_reconcile_duration_seconds_bucket"} <= queried
    assert {"nv_inference_request_success", "nv_gpu_utilization"} <= queried


def test_dashboard_configmap_and_operator_monitoring() -> None:
    assert not find(render({}), "ConfigMap")  # off by default
    objects = render({"dashboard": {"enabled": True}, "serviceMonitor": {"enabled": True}})
    (configmap,) = find(objects, "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["naiad.json"]) == json.loads(DASHBOARD.read_text())
    (service,) = find(objects, "Service")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8081, "targetPort": "metrics", "protocol": "TCP"}
    ]
    (deployment,) = find(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    monitors = {m["metadata"]["name"]: m for m in find(objects, "ServiceMonitor")}
    operator = next(m for name, m in monitors.items() if name.endswith("-operator"))
    assert operator["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert operator["spec"]["endpoints"][0]["port"] == "metrics"
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NAIAD_OPERATOR_METRICS_PORT"] == "8081"
    assert not find(render({"operator": {"metricsPort": 0}}), "Service")
