"""Service, HorizontalPodAutoscaler and PodDisruptionBudget of an InferenceService.

The HPA targets the InferenceService's own ``scale`` subresource, not the Deployment: the operator stays
the only writer of the Deployment's replicas, and ``kubectl scale nisvc``, KEDA or a user's HPA work the
same way as ours.
"""

from __future__ import annotations

from typing import Any

from naiad_operator import API_VERSION
from naiad_operator.api.inferenceservice import InferenceServiceSpec, ScaleMetric
from naiad_operator.reconcile import names
from naiad_operator.reconcile.server import GRPC_PORT, HTTP_PORT, METRICS_PORT

#: The per-pod metric the Prometheus adapter must serve for ``metric: QueueTime`` (mean queue time
#: per request, from naiad's nv_inference_queue_duration_us / nv_inference_request_success).
QUEUE_TIME_METRIC = "naiad_queue_time_us"


def desired_service(name: str, namespace: str, owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": names.child_metadata(
            names.server_name(name), namespace, names.server_labels(name), owner
        ),
        "spec": {
            "type": "ClusterIP",
            "selector": names.selector_labels(name),
            "ports": [
                {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                {
                    "name": "grpc",
                    "port": GRPC_PORT,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "kubernetes.io/h2c",
                },
                {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }


def service_urls(name: str, namespace: str) -> tuple[str, str]:
    """The in-cluster HTTP URL and gRPC address clients use."""
    host = f"{names.server_name(name)}.{namespace}.svc"
    return f"http://{host}:{HTTP_PORT}", f"{host}:{GRPC_PORT}"


def desired_hpa(
    name: str, namespace: str, owner: dict[str, Any], spec: InferenceServiceSpec
) -> dict[str, Any] | None:
    scaling = spec.autoscaling
    if scaling is None:
        return None
    if scaling.metric is ScaleMetric.QUEUE_TIME:
        metric: dict[str, Any] = {
            "type": "Pods",
            "pods": {
                "metric": {"name": QUEUE_TIME_METRIC},
                "target": {
                    "type": "AverageValue",
                    "averageValue": str(scaling.target_queue_time_microseconds),
                },
            },
        }
    else:
        metric = {
            "type": "Resource",
            "resource": {
                "name": "cpu",
                "target": {
                    "type": "Utilization",
                    "averageUtilization": scaling.target_cpu_utilization_percentage,
                },
            },
        }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": names.child_metadata(
            names.server_name(name), namespace, names.server_labels(name), owner
        ),
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": "InferenceService", "name": name},
            "minReplicas": scaling.min_replicas,
            "maxReplicas": scaling.max_replicas,
            "metrics": [metric],
        },
    }


def desired_pdb(
    name: str, namespace: str, owner: dict[str, Any], spec: InferenceServiceSpec
) -> dict[str, Any] | None:
    budget = spec.disruption
    if budget is None:
        return None
    pdb_spec: dict[str, Any] = {"selector": {"matchLabels": names.selector_labels(name)}}
    if budget.min_available is not None:
        pdb_spec["minAvailable"] = budget.min_available
    else:
        pdb_spec["maxUnavailable"] = budget.max_unavailable if budget.max_unavailable is not None else 1
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": names.child_metadata(
            names.server_name(name), namespace, names.server_labels(name), owner
        ),
        "spec": pdb_spec,
    }
