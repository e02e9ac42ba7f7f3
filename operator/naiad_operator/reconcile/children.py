"""Every child object an InferenceService should have, and those it should not have any more.

The list is complete on every pass (level-triggered), so a child deleted by hand comes back and a child
whose feature was switched off (autoscaling, the disruption budget) is removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from naiad_operator.api.inferenceservice import InferenceServiceSpec, InferenceServiceStatus
from naiad_operator.reconcile import names, server, traffic
from naiad_operator.reconcile.compare import stamp
from naiad_operator.reconcile.repository_mount import RepositoryMount


@dataclass(frozen=True, slots=True)
class ChildRef:
    api_version: str
    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class Children:
    present: tuple[dict[str, Any], ...]
    absent: tuple[ChildRef, ...]


def inference_service_children(
    meta: dict[str, Any],
    spec: InferenceServiceSpec,
    status: InferenceServiceStatus,
    mount: RepositoryMount,
    default_image: str,
    fixed_ids: bool = True,
    frontend_workers: str = "",
) -> Children:
    name, namespace = meta["name"], meta["namespace"]
    owner = names.owner_reference("InferenceService", meta)
    present: list[dict[str, Any]] = [
        server.desired_models_configmap(name, namespace, owner, server.startup_models(spec, status)),
        server.desired_deployment(
            name, namespace, owner, spec, mount, default_image, fixed_ids, frontend_workers
        ),
        traffic.desired_service(name, namespace, owner),
    ]
    absent: list[ChildRef] = []
    optional = (
        ("autoscaling/v2", "HorizontalPodAutoscaler", traffic.desired_hpa(name, namespace, owner, spec)),
        ("policy/v1", "PodDisruptionBudget", traffic.desired_pdb(name, namespace, owner, spec)),
    )
    for api_version, kind, obj in optional:
        if obj is None:
            absent.append(ChildRef(api_version, kind, names.server_name(name)))
        else:
            present.append(obj)
    return Children(tuple(stamp(obj) for obj in present), tuple(absent))
