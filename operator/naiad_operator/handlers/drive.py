"""Run a rollout plan stage by stage against the pods, checking the gate after the Load stage.

The plan itself (what, where, in which order) comes from ``reconcile.rollout`` and ``reconcile.canary``;
this module only performs it: pods in parallel, each pod's actions in order, an Event per load, unload
and failure. It reports which routing (canary weights, mirror) each pod accepted, since a pod's index
does not show it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import kopf

from naiad_operator.api.inferenceservice import Failure, ModelSpec
from naiad_operator.api.observed import PodObservation
from naiad_operator.handlers.context import OperatorContext
from naiad_operator.k8s.modelserver import ServerCallError, routing_parameters
from naiad_operator.k8s.pods import observe
from naiad_operator.reconcile import rollout
from naiad_operator.reconcile.rollout import Action, Load, Plan, Routing, StageKind, Unload
from naiad_operator.reconcile.syncjob import format_time

#: (pod, model) -> the routing a load there last set.
Routed = dict[tuple[str, str], Routing]


async def run(
    ctx: OperatorContext,
    body: dict[str, Any],
    plan: Plan,
    models: Sequence[ModelSpec],
    pod_objects: Sequence[dict[str, Any]],
    pods: list[PodObservation],
) -> tuple[list[PodObservation], dict[str, Failure], Routed]:
    """Perform every stage; returns the pods as observed afterwards, the models that failed and the
    routing each pod accepted."""
    routed: Routed = {}
    if not plan.stages:
        return pods, {}, routed
    urls = {p.name: p.url for p in pods if p.url}
    overrides = {m.name: m.config_override for m in models}
    failed: dict[str, Failure] = {}
    load_stage = plan.stage(StageKind.LOAD)
    if load_stage is not None:
        with ctx.metrics.stage_seconds.labels(StageKind.LOAD.value).time():
            errors, lost = await _execute(ctx, body, urls, load_stage.actions, routed)
        pods = await observe(ctx.server, pod_objects, ctx.resolve)
        failed = rollout.failures(plan, pods, format_time(datetime.now(UTC)), errors, lost)
        undo: list[Action] = []
        for model, failure in failed.items():
            kopf.event(
                body,
                type="Warning",
                reason="BlockedByFailedLoad",
                message=f"{model}: {failure.message} (pod {failure.pod}); rolling back",
            )
            undo += rollout.rollback(plan.models[model], pods, overrides.get(model))
        await _execute(ctx, body, urls, undo, routed)
    for kind in (StageKind.ROUTE, StageKind.SWITCH, StageKind.UNLOAD):
        stage = plan.stage(kind)
        if stage is not None:
            with ctx.metrics.stage_seconds.labels(kind.value).time():
                await _execute(ctx, body, urls, rollout.without(stage, set(failed)).actions, routed)
    return await observe(ctx.server, pod_objects, ctx.resolve), failed, routed


async def _execute(
    ctx: OperatorContext,
    body: dict[str, Any],
    urls: dict[str, str],
    actions: Sequence[Action],
    routed: Routed,
) -> tuple[dict[tuple[str, str], str], set[str]]:
    """Run actions, pods in parallel and each pod's in order; the errors servers answered (pod, model),
    and the pods that did not answer at all (gone or restarted mid-call). Loads that set a routing and
    succeeded are added to ``routed``."""
    errors: dict[tuple[str, str], str] = {}
    lost: set[str] = set()
    by_pod: dict[str, list[Action]] = {}
    for action in actions:
        by_pod.setdefault(action.pod, []).append(action)

    async def on_pod(pod: str, queue: list[Action]) -> None:
        url = urls.get(pod)
        if url is None:
            return
        for action in queue:
            error = await _perform(ctx, body, url, urls, action)
            if error is None:
                if isinstance(action, Load) and action.routing is not None:
                    routed[(pod, action.model)] = action.routing
                continue
            if error.status == 0:
                lost.add(pod)
                return
            errors[(pod, action.model)] = error.message

    await asyncio.gather(*(on_pod(pod, queue) for pod, queue in by_pod.items()))
    return errors, lost


async def _perform(
    ctx: OperatorContext, body: dict[str, Any], url: str, urls: dict[str, str], action: Action
) -> ServerCallError | None:
    """One action; a server error becomes an Event and is returned (the gate decides what it means)."""
    unload = isinstance(action, Unload)
    try:
        if isinstance(action, Unload):
            await ctx.server.unload(url, action.model)
            message = f"{action.model} unloaded from pod {action.pod}"
        else:
            await _load(ctx, body, url, [u for u in urls.values() if u != url], action)
            pinned = f", default {action.default_version}" if action.default_version is not None else ""
            message = f"{action.model} versions {list(action.versions)} on pod {action.pod}{pinned}"
            message += _describe(action.routing)
    except ServerCallError as exc:
        verb = "unload" if unload else "load"
        kopf.event(
            body,
            type="Warning",
            reason="ModelUnloadFailed" if unload else "ModelLoadFailed",
            message=f"{action.model} {verb} on pod {action.pod}: {exc.message}",
        )
        return exc
    kopf.event(body, type="Normal", reason="ModelUnloaded" if unload else "ModelLoaded", message=message)
    return None


async def _load(
    ctx: OperatorContext, body: dict[str, Any], url: str, peers: Sequence[str], action: Load
) -> None:
    """Load with exactly ``action.versions``: a Load names versions through the config's version policy,
    so it needs the model's full config as a base. That comes from this pod, another pod, or the last
    one seen; failing those (or when content changed: the config may have too) the server first loads
    the model plain from the repository and its answer becomes the base."""
    key = (body["metadata"]["uid"], action.model)
    base = None if action.fresh else await _loaded_config(ctx, [url, *peers], action.model)
    base = base or (None if action.fresh else ctx.configs.get(key))
    if base is None:
        await ctx.server.load(url, action.model, None, None)
        base = await ctx.server.config(url, action.model)
    if base is not None:
        ctx.configs[key] = base
    config = rollout.load_config(base, action.versions, action.config_override)
    routing = action.routing
    parameters = None if routing is None else routing_parameters(dict(routing.weights), routing.mirror)
    if config is not None:
        await ctx.server.load(url, action.model, config, action.default_version, parameters)


def _describe(routing: Routing | None) -> str:
    if routing is None:
        return ""
    weights = ", ".join(f"v{v} {w}%" for v, w in routing.weights) or "none"
    mirror = f", mirror {routing.mirror[1]}% to v{routing.mirror[0]}" if routing.mirror else ""
    return f", weights {weights}{mirror}"


async def _loaded_config(ctx: OperatorContext, urls: Sequence[str], model: str) -> dict[str, Any] | None:
    for url in urls:
        try:
            config = await ctx.server.config(url, model)
        except ServerCallError:
            continue
        if config is not None:
            return config
    return None
