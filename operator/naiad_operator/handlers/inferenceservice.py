"""InferenceService handlers: children, in-place model rollouts and per-pod status.

Change handlers react at once; the timer re-reads every pod's index and repairs drift (a restarted pod, a
model unloaded by hand). A repository that moves to a new snapshot triggers its InferenceServices
through an index, so a sync turns into a rollout without waiting for the timer. Every handler only asks
for a pass (``handlers.passes``): passes run in the background, so one slow rollout holds up no other
InferenceService, and a spec change replaces the pass in flight.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kopf

from naiad_operator import API_VERSION, GROUP, VERSION
from naiad_operator.api.inferenceservice import InferenceServiceSpec, InferenceServiceStatus, TransitionStatus
from naiad_operator.api.modelrepository import ModelRepositorySpec, ModelRepositoryStatus, StorageMode
from naiad_operator.api.observed import DeploymentObservation, PodObservation
from naiad_operator.handlers import children, drive, events, watches
from naiad_operator.handlers.context import OperatorContext
from naiad_operator.handlers.startup import context_of
from naiad_operator.k8s.pods import confirmed, describe, observe, scrape
from naiad_operator.k8s.problems import volume_events
from naiad_operator.reconcile import (
    canary,
    demand,
    names,
    nodecache,
    placement,
    readiness,
    retry,
    rollout,
    traffic,
)
from naiad_operator.reconcile.children import inference_service_children
from naiad_operator.reconcile.compare import merge_patch, quantity_bytes, stamp
from naiad_operator.reconcile.repository_mount import RepositoryMount
from naiad_operator.reconcile.service_status import Observed, service_status
from naiad_operator.reconcile.syncjob import format_time

KIND = "InferenceService"
PLURAL = "inferenceservices"


@kopf.index(GROUP, VERSION, PLURAL)
def by_repository(namespace: str | None, name: str, spec: kopf.Spec, **_: Any) -> dict[tuple[str, str], str]:
    """InferenceServices by the repository they serve from."""
    return {(watches.namespaced(namespace), str(spec.get("repository", {}).get("name", ""))): name}


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
@kopf.on.update(GROUP, VERSION, PLURAL, field="metadata.annotations")  # the retry annotation
async def changed(namespace: str | None, name: str, memo: kopf.Memo, **kwargs: Any) -> None:
    """The spec changed (or the operator started): replace any pass in flight with a new one."""
    ctx = context_of(memo)
    watches.attach(ctx, kwargs)
    namespace = watches.namespaced(namespace)
    ctx.passes.restart(_key(namespace, name), lambda: reconcile(ctx, namespace, name))


async def tick(ctx: OperatorContext, namespace: str, name: str) -> None:
    """Level-triggered pass (``periodic``): the truth from every pod, drift repaired; writes nothing
    when all is well."""
    request(ctx, namespace, name)


async def requested(ctx: OperatorContext, namespace: str, name: str) -> None:
    """``watches.nudge``'s runner: a background pass, coalesced with one already asked for."""
    request(ctx, namespace, name)


def request(ctx: OperatorContext, namespace: str, name: str) -> None:
    ctx.passes.request(_key(namespace, name), lambda: reconcile(ctx, namespace, name))


def _key(namespace: str, name: str) -> str:
    return f"{KIND}/{namespace}/{name}"


@kopf.on.event("v1", "pods", labels={names.ISVC_LABEL: kopf.PRESENT})
@kopf.on.event("apps", "v1", "deployments", labels={names.ISVC_LABEL: kopf.PRESENT, **watches.MANAGED})
async def server_changed(
    event: kopf.RawEvent,
    namespace: str | None,
    labels: kopf.Labels,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """A server pod or the Deployment changed (scheduled, Ready, failed, scaled): a pass now. A pod
    whose server container stopped being ready has its readiness gate closed first, without waiting for
    the service's lock (a rollout may hold it): restarted, it must not rejoin the Service with what it
    loaded at start."""
    namespace = watches.namespaced(namespace)
    obj: dict[str, Any] = dict(event.get("object") or {})
    if obj.get("kind") == "Pod" and event.get("type") != "DELETED" and readiness.to_close([describe(obj)]):
        await drive.close_gate(context_of(memo), namespace, obj["metadata"]["name"], "ContainerNotReady")
    by_label: kopf.Index[tuple[str, str], str] = kwargs["services_by_label"]
    isvc = watches.owner(by_label, namespace, labels.get(names.ISVC_LABEL))
    await watches.child_event(context_of(memo), event, kwargs, KIND, namespace, isvc, requested)


@kopf.on.event(GROUP, VERSION, "modelrepositories")
async def repository_moved(
    event: kopf.RawEvent,
    namespace: str | None,
    name: str,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """A repository switched snapshots (or became ready): roll its InferenceServices forward now."""
    namespace = watches.namespaced(namespace)
    services: kopf.Index[tuple[str, str], str] = kwargs["by_repository"]
    status = (event.get("object") or {}).get("status") or {}
    current = (status.get("snapshot") or {}).get("current")
    seen: dict[tuple[str, str], str | None] = memo.setdefault("snapshots_seen", {})
    if current is None or seen.get((namespace, name)) == current:
        return
    seen[(namespace, name)] = current
    ctx = context_of(memo)
    watches.attach(ctx, kwargs)
    for isvc in list(services.get((namespace, name), [])):
        request(ctx, namespace, isvc)


async def reconcile(ctx: OperatorContext, namespace: str, name: str) -> None:
    key = _key(namespace, name)
    async with ctx.locks[key]:
        ctx.queued.discard(key)
        with ctx.metrics.reconcile_seconds.labels(KIND).time():
            try:
                await _reconcile_locked(ctx, namespace, name)
            except Exception:
                ctx.metrics.reconcile_errors.labels(KIND).inc()
                raise


async def _reconcile_locked(ctx: OperatorContext, namespace: str, name: str) -> None:
    body = await ctx.kube.get(API_VERSION, KIND, namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return
    meta = body["metadata"]
    generation = int(meta.get("generation") or 1)
    spec = InferenceServiceSpec.model_validate(body.get("spec") or {})
    before = InferenceServiceStatus.model_validate(body.get("status") or {})

    repo_body = await ctx.cache.get(API_VERSION, "ModelRepository", namespace, spec.repository.name)
    repo_status = ModelRepositoryStatus.model_validate(repo_body.get("status") or {}) if repo_body else None
    mount = RepositoryMount(names.claim_name(spec.repository.name, None))
    if repo_body is not None:
        repo_spec = ModelRepositorySpec.model_validate(repo_body.get("spec") or {})
        current = repo_status.snapshot.current if repo_status is not None else None
        claim = names.claim_name(spec.repository.name, repo_spec.storage.claim_name)
        if repo_spec.storage.mode is StorageMode.NODE_CACHE:
            claim = nodecache.claim_name(spec.repository.name)
        mount = RepositoryMount(
            claim,
            repo_spec.storage.mode,
            repo_spec,
            spec.repository.snapshot or current,
        )

    settings = ctx.settings
    wanted = inference_service_children(
        meta, spec, before, mount, settings.server_image, settings.fixed_user_ids,
        settings.server_frontend_workers,
    )
    deployment: dict[str, Any] | None = None
    for obj in wanted.present:
        applied = await children.ensure(ctx.cache, obj)
        if obj["kind"] == "Deployment":
            deployment = applied
    if before.observed_generation != generation:  # only a spec change can make a child unwanted
        for ref in wanted.absent:
            await children.remove(ctx.cache, namespace, ref)

    pod_objects = await confirmed(
        ctx.kube, await ctx.cache.server_pods(namespace, names.selector_labels(name))
    )
    events = await volume_events(ctx.kube, namespace, pod_objects)
    memory_limit = quantity_bytes(spec.server.resources.limits.get("memory"))
    weigh = memory_limit is not None and any(m.rollout.strategy is None for m in spec.models)
    pods = await observe(ctx.server, pod_objects, ctx.resolve, events, memory=weigh)
    records = {m.name: m for m in before.models}
    acting = mount.acting_pods(pods)
    snapshot = rollout.target_snapshot(spec.repository.snapshot, repo_status, records, acting)
    complete = repo_status is None or repo_status.models_complete is not False
    # every pod's request counters, each pass: the models' request rates (and the copies they ask for)
    scraped = await scrape(ctx.server, pods)
    now = datetime.now(UTC)
    uid = str(meta.get("uid") or "")
    window = ctx.settings.reconcile_interval / 2  # a periodic pass always closes one; a burst does not
    opened, window_rates = demand.advance(ctx.request_samples.get(uid), demand.sample(scraped, now), window)
    ctx.request_samples[uid] = opened
    scales = demand.scales(spec.models, records, window_rates, now)
    attempt = retry.Attempt(now, retry.spec_fingerprint(spec), retry.retry_token(meta.get("annotations")))
    plan = rollout.plan(
        spec.models,
        snapshot,
        mount.planning_records(records),
        acting,
        attempt,
        memory_limit,
        listing_complete=complete,
        copies={name: held.copies for name, held in scales.items()},
    )
    acting_names = {p.name for p in acting}
    counters = (
        {pod: found for pod, found in scraped.items() if pod in acting_names}
        if canary.wants_scrape(spec.models, plan)
        else None
    )
    decisions = {
        m.name: canary.decide(
            m,
            plan.models[m.name],
            records.get(m.name),
            rollout.actionable(acting),
            now,
            ctx.baselines.get((uid, m.name)),
            counters,
        )
        for m in spec.models
        if m.name in plan.models
    }
    routings = {(pod, model): r for (owner, pod, model), r in ctx.routes.items() if owner == uid}
    overrides = {m.name: m.config_override for m in spec.models}
    plan = canary.apply(plan, decisions, acting, routings, overrides)
    acting_objects = [o for o in pod_objects if o["metadata"]["name"] in acting_names]
    acted, failures, routed = await drive.run(ctx, body, plan, spec.models, acting_objects, acting)
    pods = _replace(pods, acted)
    for (pod, model), routing in routed.items():
        ctx.routes[(uid, pod, model)] = routing
    failures = {**failures, **{n: d.abort for n, d in decisions.items() if d.abort and n not in failures}}
    await _traffic_bookkeeping(ctx, body, uid, decisions, acted)

    status = service_status(
        name,
        namespace,
        generation,
        spec,
        before,
        plan,
        Observed(pods, _deployment(deployment), repo_status, failures),
        traffic.service_urls(name, namespace),
        names.selector_string(name),
        format_time(datetime.now(UTC)),
        ctx.settings.replica_detail_limit,
    )
    mirrors = {
        m.name: canary.mirror_status(m, counters, records[m.name].mirror if m.name in records else None)
        for m in spec.models
    }
    status = canary.record(status, decisions, mirrors)
    status = demand.record(status, spec.models, window_rates, scales)
    # every pod's peers file: which pods hold which models, as this pass found them
    owner = names.owner_reference(KIND, meta)
    peers = placement.desired_peers_configmap(name, namespace, owner, spec.models, pods)
    await children.ensure(ctx.cache, stamp(peers))
    blocked = sum(m.transition_status is TransitionStatus.BLOCKED_BY_FAILED_LOAD for m in status.models)
    ctx.metrics.blocked_models.labels(namespace, name).set(blocked)
    if failures:
        ctx.metrics.load_failures.labels(namespace).inc(len(failures))
    patch = merge_patch(before.dump(), status.dump())
    if patch:
        await ctx.kube.patch_status(API_VERSION, KIND, namespace, name, patch)
    wake = canary.next_wake(decisions)
    if wake is not None:
        delay = (wake - datetime.now(UTC)).total_seconds()
        ctx.passes.wake(_key(namespace, name), delay, lambda: reconcile(ctx, namespace, name))


async def _traffic_bookkeeping(
    ctx: OperatorContext,
    body: dict[str, Any],
    uid: str,
    decisions: dict[str, canary.Decision],
    pods: list[PodObservation],
) -> None:
    """Events of the canaries' steps, and the baseline scrape of each step that began: taken after this
    pass set the step's weights, so its window holds only traffic split the new way."""
    for decision in decisions.values():
        if decision.event is not None:
            kind, reason, message = decision.event
            events.post(body, type=kind, reason=reason, message=message)
    starting = [d for d in decisions.values() if d.new_baseline and d.canary is not None]
    if not starting:
        return
    counters = await scrape(ctx.server, rollout.actionable(pods))
    for decision in starting:
        assert decision.canary is not None
        step = decision.canary.steps[-1]
        ctx.baselines[(uid, decision.model)] = canary.Baseline(
            decision.canary.step, step.started_at, counters
        )


def _replace(pods: list[PodObservation], fresh: list[PodObservation]) -> list[PodObservation]:
    """``pods`` with the ones a rollout re-read after acting replaced by their new observation."""
    by_name = {p.name: p for p in fresh}
    return [by_name.get(p.name, p) for p in pods]


def _deployment(obj: dict[str, Any] | None) -> DeploymentObservation | None:
    if obj is None:
        return None
    status = obj.get("status") or {}
    stalled = next(
        (
            c.get("message") or "the Deployment's progress deadline passed"
            for c in status.get("conditions") or []
            if c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded"
        ),
        None,
    )
    return DeploymentObservation(
        replicas=int(status.get("replicas") or 0),
        ready_replicas=int(status.get("readyReplicas") or 0),
        updated_replicas=int(status.get("updatedReplicas") or 0),
        generation=int(obj["metadata"].get("generation") or 0),
        observed_generation=int(status.get("observedGeneration") or 0),
        stalled=stalled,
    )
