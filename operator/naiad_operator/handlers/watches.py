"""Watches: what the operator learns without asking, and the passes a change triggers at once.

kopf indexes keep every object the operator owns (by label), its server and sync-Job pods, and its own
resources in memory, fed by watches; a pass reads them through ``k8s.cache`` instead of the API server.
A server pod, Deployment or sync Job that changes triggers a pass over its InferenceService or
ModelRepository within the watch's latency, so status moves when the cluster does, not a timer period
later; the timers stay as the level-triggered safety net. Triggered passes coalesce: while one waits
for the object's lock, further changes add nothing (the queued pass will see them).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from naiad_operator import API_VERSION, GROUP, VERSION
from naiad_operator.handlers.context import OperatorContext
from naiad_operator.reconcile import names

MANAGED = {"app.kubernetes.io/managed-by": names.MANAGED_BY}

#: (api_version, kind) -> (group, version, plural) of every kind read through the cache.
OWNED: dict[tuple[str, str], tuple[str, str, str]] = {
    ("v1", "ConfigMap"): ("", "v1", "configmaps"),
    ("v1", "Service"): ("", "v1", "services"),
    ("v1", "PersistentVolumeClaim"): ("", "v1", "persistentvolumeclaims"),
    ("apps/v1", "Deployment"): ("apps", "v1", "deployments"),
    ("batch/v1", "Job"): ("batch", "v1", "jobs"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"): ("autoscaling", "v2", "horizontalpodautoscalers"),
    ("policy/v1", "PodDisruptionBudget"): ("policy", "v1", "poddisruptionbudgets"),
}
OURS = {(API_VERSION, "ModelRepository"): "modelrepositories"}


def _index_id(plural: str) -> str:
    return f"cached_{plural}"


def namespaced(namespace: str | None) -> str:
    """The namespace kopf passed a handler: kopf's handler types allow None (a cluster-scoped kind), and
    every kind this operator watches is namespaced."""
    if namespace is None:
        raise kopf.PermanentError("a namespaced object came without its namespace")
    return namespace


def _by_name(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    return {(namespaced(namespace), name): dict(body)}


for _group, _version, _plural in OWNED.values():
    kopf.index(_group, _version, _plural, labels=MANAGED, id=_index_id(_plural))(_by_name)
for _plural in OURS.values():
    kopf.index(GROUP, VERSION, _plural, id=_index_id(_plural))(_by_name)


@kopf.index("v1", "pods", labels={names.ISVC_LABEL: kopf.PRESENT})
def cached_server_pods(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    return {(namespaced(namespace), labels[names.ISVC_LABEL]): dict(body)}


@kopf.index("v1", "pods", labels={"job-name": kopf.PRESENT, names.REPO_LABEL: kopf.PRESENT})
def cached_job_pods(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    return {(namespaced(namespace), labels["job-name"]): dict(body)}


@kopf.index(GROUP, VERSION, "inferenceservices")
def services_by_label(namespace: str | None, name: str, **_: Any) -> dict[tuple[str, str], str]:
    """InferenceService names by the label value their children carry (a cut name for long ones)."""
    return {(namespaced(namespace), names.dns_name(name)): name}


@kopf.index(GROUP, VERSION, "modelrepositories")
def repositories_by_label(namespace: str | None, name: str, **_: Any) -> dict[tuple[str, str], str]:
    return {(namespaced(namespace), names.dns_name(name)): name}


def attach(ctx: OperatorContext, kwargs: dict[str, Any]) -> None:
    """Point the cache at the indexes (kopf hands them to every handler as keyword arguments)."""
    cache = ctx.cache
    if cache.ready:
        return
    # kopf.event() reads its queue from context variables that kopf sets only inside its handlers: the
    # periodic passes run in a copy of this handler's context, or their Events would be lost
    ctx.handler_context = contextvars.copy_context()
    objects = {key: kwargs[_index_id(plural)] for key, (_, _, plural) in OWNED.items()}
    objects.update({key: kwargs[_index_id(plural)] for key, plural in OURS.items()})
    cache.objects = objects
    cache.pods, cache.job_pods = kwargs["cached_server_pods"], kwargs["cached_job_pods"]
    ctx.services, ctx.repositories = kwargs["services_by_label"], kwargs["repositories_by_label"]
    cache.ready = True


def changed_state(ctx: OperatorContext, body: Mapping[str, Any], event_type: str | None) -> bool:
    """Whether a watched object's status moved in a way a pass cares about (readiness, counts,
    conditions, container states); our own writes to a Deployment's spec, and repeated events with the
    same status, trigger nothing. Remembered per object in memory; a deletion always counts."""
    meta = body.get("metadata") or {}
    key = f"{body.get('kind')}/{meta.get('namespace')}/{meta.get('name')}"
    if event_type == "DELETED":
        ctx.fingerprints.pop(key, None)
        return True
    status = body.get("status") or {}
    quiet = event_type == "ADDED" and not status  # just created (often by us): nothing to report yet
    fingerprint = repr(
        (
            status.get("phase"),
            [(c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or []],
            [
                (cs.get("name"), sorted((cs.get("state") or {}).keys()), cs.get("restartCount"))
                for cs in [
                    *(status.get("initContainerStatuses") or []),
                    *(status.get("containerStatuses") or []),
                ]
            ],
            [status.get(k) for k in ("replicas", "readyReplicas", "updatedReplicas", "succeeded", "failed")],
            (meta.get("deletionTimestamp") is not None),
        )
    )
    if ctx.fingerprints.get(key) == fingerprint:
        return False
    ctx.fingerprints[key] = fingerprint
    return not quiet


async def nudge(ctx: OperatorContext, kind: str, namespace: str, name: str, run: Callable[..., Any]) -> None:
    """Run a pass over ``kind/namespace/name`` unless one is already queued for it."""
    key = f"{kind}/{namespace}/{name}"
    if key in ctx.queued:
        return
    ctx.queued.add(key)
    await run(ctx, namespace, name)


async def child_event(
    ctx: OperatorContext,
    event: kopf.RawEvent,
    kwargs: dict[str, Any],
    owner_kind: str,
    namespace: str,
    owner_name: str | None,
    run: Callable[..., Any],
) -> None:
    """A pass over the owner of a watched child whose status moved (not for the initial listing, which the
    resume handlers cover, nor for events that only repeat what the last one said)."""
    event_type = event.get("type")
    if event_type is None or owner_name is None:
        return
    if not changed_state(ctx, event.get("object") or {}, event_type):
        return
    attach(ctx, kwargs)
    await nudge(ctx, owner_kind, namespace, owner_name, run)


def owner(index: kopf.Index[tuple[str, str], str], namespace: str, label: str | None) -> str | None:
    for name in index.get((namespace, label or ""), []):
        return name
    return None
