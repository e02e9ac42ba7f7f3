"""ModelRepository handlers: the claim, sync Jobs on create/change/interval/trigger, and retention."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kopf

from naiad_operator import API_VERSION, GROUP, VERSION
from naiad_operator.api.modelrepository import (
    ModelRepositorySpec,
    ModelRepositoryStatus,
    StorageMode,
    SyncResult,
)
from naiad_operator.api.observed import PodProblem
from naiad_operator.handlers import children, events, watches
from naiad_operator.handlers.context import OperatorContext
from naiad_operator.handlers.startup import context_of
from naiad_operator.k8s.errors import ConflictError
from naiad_operator.k8s.jobs import observe_job
from naiad_operator.reconcile import listing, names, nodecache, repository_status, storage, syncjob
from naiad_operator.reconcile.compare import merge_patch, stamp

KIND = "ModelRepository"
PLURAL = "modelrepositories"


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def changed(namespace: str | None, name: str, memo: kopf.Memo, **kwargs: Any) -> None:
    """A new or changed repository: reconcile now rather than at the next tick."""
    ctx = context_of(memo)
    watches.attach(ctx, kwargs)
    await reconcile(ctx, watches.namespaced(namespace), name)


async def tick(ctx: OperatorContext, namespace: str, name: str) -> None:
    """Level-triggered pass (``periodic``): finish running syncs, start interval syncs, repair the claim."""
    await watches.nudge(ctx, KIND, namespace, name, reconcile)


@kopf.on.event("batch", "v1", "jobs", labels={names.REPO_LABEL: kopf.PRESENT, **watches.MANAGED})
@kopf.on.event("v1", "pods", labels={names.REPO_LABEL: kopf.PRESENT, "job-name": kopf.PRESENT})
async def job_changed(
    event: kopf.RawEvent,
    namespace: str | None,
    labels: kopf.Labels,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """A sync Job or its pod changed (finished, stuck): a pass now rather than at the next poll."""
    namespace = watches.namespaced(namespace)
    by_label: kopf.Index[tuple[str, str], str] = kwargs["repositories_by_label"]
    repository = watches.owner(by_label, namespace, labels.get(names.REPO_LABEL))
    await watches.child_event(context_of(memo), event, kwargs, KIND, namespace, repository, reconcile)


async def reconcile(ctx: OperatorContext, namespace: str, name: str) -> None:
    key = f"{KIND}/{namespace}/{name}"
    async with ctx.locks[key]:
        ctx.queued.discard(key)
        with ctx.metrics.reconcile_seconds.labels(KIND).time():
            try:
                await _reconcile_locked(ctx, namespace, name)
            except Exception:
                ctx.metrics.reconcile_errors.labels(KIND).inc()
                raise


async def _reconcile_locked(ctx: OperatorContext, namespace: str, name: str) -> None:
    body = await ctx.kube.get(API_VERSION, KIND, namespace, name)  # fresh: the last pass may have written
    if body is None or body["metadata"].get("deletionTimestamp"):
        return
    meta = body["metadata"]
    generation = int(meta.get("generation") or 1)
    spec = ModelRepositorySpec.model_validate(body.get("spec") or {})
    before = ModelRepositoryStatus.model_validate(body.get("status") or {})
    now = datetime.now(UTC)
    claim = names.claim_name(name, spec.storage.claim_name)
    desired_claim = storage.desired_claim(name, namespace, spec, names.owner_reference(KIND, meta))
    if desired_claim is not None:
        await children.ensure(ctx.cache, stamp(desired_claim))
    if spec.storage.mode is StorageMode.NODE_CACHE:
        root = ctx.settings.node_cache_path
        await children.ensure(ctx.cache, stamp(nodecache.desired_volume(root, namespace, name, spec)))
        owner = names.owner_reference(KIND, meta)
        await children.ensure(ctx.cache, stamp(nodecache.desired_claim(namespace, name, spec, owner)))
    status = before.model_copy(update={"claim_name": claim})

    stuck: PodProblem | None = None
    if status.active_job:
        job = await observe_job(ctx.cache, namespace, status.active_job)
        stuck = job.problem if job is not None and not job.finished else None
        if job is None or job.finished:
            # live, not from the watch: the Job wrote it moments ago
            written = await ctx.kube.get("v1", "ConfigMap", namespace, listing.configmap_name(name))
            summary = listing.best(
                syncjob.parse_summary(job.message) if job is not None else None,
                listing.read(written, status.active_job),
            )
            backoff = syncjob.Backoff(ctx.settings.sync_retry_seconds, ctx.settings.sync_retry_max_seconds)
            status = repository_status.finish_sync(status, spec, job, summary, now, backoff, ctx.jitter())
            _sync_event(body, status)
            _count_sync(ctx, status)

    if syncjob.superseded(spec, status, generation) and status.active_job:
        cancelled = status.active_job
        await ctx.kube.delete("batch/v1", "Job", namespace, cancelled)
        status = repository_status.cancel_sync(status, generation, now, spec.suspend)
        stuck = None
        why = "the repository was suspended" if spec.suspend else "the spec changed"
        events.post(body, type="Normal", reason="SyncCancelled", message=f"Job {cancelled}: {why}")

    reason = syncjob.sync_reason(spec, status, generation, now)
    if reason is not None:
        owner = names.owner_reference(KIND, meta)
        for obj in listing.desired_objects(name, namespace, owner, spec):
            await children.ensure(ctx.cache, stamp(obj))
        services = await ctx.kube.list(API_VERSION, "InferenceService", namespace)
        job_name = names.sync_job_name(name, status.sync_count + 1)
        job_body = syncjob.desired_sync_job(
            name,
            namespace,
            owner,
            spec,
            claim,
            job_name,
            ctx.settings.server_image,
            ctx.settings.sync_job_ttl_seconds,
            ctx.settings.fixed_user_ids,
            syncjob.pinned_snapshots(name, services),
        )
        try:
            await ctx.kube.create(job_body)
        except ConflictError:
            # A previous pass created it and died before recording it: it is ours only if we own it.
            existing = await ctx.kube.get("batch/v1", "Job", namespace, job_name)
            owners = ((existing or {}).get("metadata") or {}).get("ownerReferences") or []
            if not any(o.get("uid") == meta["uid"] for o in owners):
                raise
        status = repository_status.start_sync(status, spec, job_name, generation, now)
        events.post(
            body,
            type="Normal",
            reason="SyncStarted",
            message=f"{reason}: Job {job_name} syncs {spec.source.uri}",
        )

    status = repository_status.with_conditions(status, generation, now, stuck if status.active_job else None)
    patch = merge_patch(before.dump(), status.dump())
    if patch:
        await ctx.kube.patch_status(API_VERSION, KIND, namespace, name, patch)


def _count_sync(ctx: OperatorContext, status: ModelRepositoryStatus) -> None:
    last = status.last_sync
    if last is None or last.result is None:
        return
    ctx.metrics.syncs.labels(last.result.value).inc()
    if last.result is not SyncResult.FAILED:
        ctx.metrics.sync_seconds.observe(last.duration_seconds or 0.0)
        ctx.metrics.sync_bytes.inc(last.bytes_copied or 0)


def _sync_event(body: dict[str, Any], status: ModelRepositoryStatus) -> None:
    last = status.last_sync
    if last is None:
        return
    if last.result is SyncResult.FAILED:
        events.post(
            body,
            type="Warning",
            reason="SyncFailed",
            message=f"Job {last.job_name}: {last.message or 'failed'}; "
            f"snapshot {status.snapshot.current} kept",
        )
    else:
        events.post(
            body,
            type="Normal",
            reason="Synced",
            message=f"Job {last.job_name}: {last.result}: snapshot {last.snapshot}, "
            f"{last.objects_copied} objects copied, {last.objects_reused} reused",
        )
