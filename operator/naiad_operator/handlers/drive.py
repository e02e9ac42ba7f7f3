"""Run a rollout plan stage by stage against the pods, checking the gate after the Load stage.

The plan itself (what, where, in which order) comes from ``reconcile.rollout`` and ``reconcile.canary``;
this module only performs it: pods in parallel, each pod's actions in order, an Event per load, unload
and failure. It reports which routing (canary weights, mirror) each pod accepted, since a pod's index
does not show it. The ``PerPod`` stage goes one pod at a time: the pod's readiness gate closes (it leaves
the Service's endpoints), the endpoints get time to follow, the pod's models are replaced, and the gate
opens again; the next pod goes only once this one is Ready. Pods held out by the gate since they started
are let in once every action on them succeeded (``reconcile.readiness``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from naiad_operator.api.inferenceservice import Failure, ModelSpec
from naiad_operator.api.observed import PodObservation
from naiad_operator.handlers import events
from naiad_operator.handlers.context import OperatorContext
from naiad_operator.k8s.modelserver import ServerCallError, routing_parameters
from naiad_operator.k8s.pods import gate_state, observe, pod_ready, set_gate
from naiad_operator.reconcile import readiness, rollout
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
    namespace = body["metadata"]["namespace"]
    for pod in readiness.to_close(pods):
        await close_gate(ctx, namespace, pod.name, "ContainerRestarted")
    if not plan.stages and not plan.admit:
        return pods, {}, routed
    urls = {p.name: p.url for p in pods if p.url}
    overrides = {m.name: m.config_override for m in models}
    failed: dict[str, Failure] = {}
    trouble: set[str] = set()
    """Pods where some action failed or went unanswered: not let in by the gate this pass."""
    load_stage = plan.stage(StageKind.LOAD)
    if load_stage is not None:
        with ctx.metrics.stage_seconds.labels(StageKind.LOAD.value).time():
            errors, lost = await _execute(ctx, body, urls, load_stage.actions, routed)
        trouble |= {pod for pod, _ in errors} | lost
        pods = await observe(ctx.server, pod_objects, ctx.resolve)
        failed = rollout.failures(plan, pods, _now(), errors, lost)
        undo: list[Action] = []
        for model, failure in failed.items():
            events.post(
                body,
                type="Warning",
                reason="BlockedByFailedLoad",
                message=f"{model}: {failure.message} (pod {failure.pod}); rolling back",
            )
            undo += rollout.rollback(plan.models[model], pods, overrides.get(model))
            trouble.add(failure.pod or "")
        errors, lost = await _execute(ctx, body, urls, undo, routed)
        trouble |= {pod for pod, _ in errors} | lost
    for kind in (StageKind.ROUTE, StageKind.SWITCH, StageKind.UNLOAD):
        stage = plan.stage(kind)
        if stage is not None:
            with ctx.metrics.stage_seconds.labels(kind.value).time():
                actions = rollout.without(stage, set(failed)).actions
                errors, lost = await _execute(ctx, body, urls, actions, routed)
            trouble |= {pod for pod, _ in errors} | lost
    starts = {p.name: p.restarts for p in pods}
    admitted = [
        name
        for name in plan.admit
        if name not in trouble and await _admit(ctx, namespace, name, starts.get(name))
    ]
    per_pod = plan.stage(StageKind.PER_POD)
    if per_pod is not None:
        acting = [o["metadata"]["name"] for o in pod_objects]
        with ctx.metrics.stage_seconds.labels(StageKind.PER_POD.value).time():
            if all([await _until(ctx, namespace, name, pod_ready) for name in admitted]):
                failed.update(
                    await _one_pod_at_a_time(
                        ctx, body, plan, per_pod.actions, urls, overrides, acting, routed
                    )
                )
    return await observe(ctx.server, pod_objects, ctx.resolve), failed, routed


def _now() -> str:
    return format_time(datetime.now(UTC))


async def close_gate(ctx: OperatorContext, namespace: str, pod: str, reason: str) -> int | None:
    """Take ``pod`` out of the Service's endpoints (its gate condition False): the container start it
    was closed at, or None if the pod is gone or changed under the write."""
    current = await ctx.kube.get("v1", "Pod", namespace, pod)
    if current is None:
        return None
    restarts = int(gate_state(current)["restarts"])
    condition = readiness.gate_condition(False, restarts, reason, _now())
    return restarts if await set_gate(ctx.kube, current, condition) else None


async def _admit(
    ctx: OperatorContext, namespace: str, pod: str, restarts: int | None, wait: float = 0.0
) -> bool:
    """Open ``pod``'s gate, once its container is ready (the kubelet reports a server that just finished
    loading within its probe period: ``wait`` seconds at most), if that container is still the one the
    operator loaded (``restarts``): one restarted meanwhile holds only what it loaded at start."""
    ready = await _until(ctx, namespace, pod, lambda o: bool(gate_state(o)["containers_ready"]), wait)
    current = await ctx.kube.get("v1", "Pod", namespace, pod)
    if not ready or current is None or current["metadata"].get("deletionTimestamp"):
        return False
    now_restarts = int(gate_state(current)["restarts"])
    if restarts is not None and now_restarts != restarts:
        return False
    condition = readiness.gate_condition(True, now_restarts, "ModelsLoaded", _now())
    return await set_gate(ctx.kube, current, condition)


async def _one_pod_at_a_time(
    ctx: OperatorContext,
    body: dict[str, Any],
    plan: Plan,
    actions: Sequence[Action],
    urls: dict[str, str],
    overrides: dict[str, Any],
    acting: Sequence[str],
    routed: Routed,
) -> dict[str, Failure]:
    """The ``PerPod`` stage: out of the endpoints (the pod reported not Ready), drained, replaced,
    checked, back in, Ready; then the next pod. A failure rolls that pod back and stops the stage (the
    other pods still serve the old versions); so does a pod that does not come back Ready or is never
    reported out, or any other pod of the service found not Ready before a pod goes out: at most one pod
    is ever out (the next pass carries on)."""
    namespace = body["metadata"]["namespace"]
    by_pod: dict[str, list[Action]] = {}
    for action in actions:
        by_pod.setdefault(action.pod, []).append(action)
    failed: dict[str, Failure] = {}
    for pod, queue in sorted(by_pod.items()):
        models = sorted({a.model for a in queue})
        others = [await ctx.kube.get("v1", "Pod", namespace, name) for name in acting if name != pod]
        if not all(o is not None and pod_ready(o) for o in others):
            break
        started = await close_gate(ctx, namespace, pod, "PerPodRollout")
        if started is None:
            continue
        events.post(body, type="Normal", reason="PerPodRollout", message=f"pod {pod} out for {models}")
        # The EndpointSlice controller drops the pod only once the kubelet has turned the closed gate into
        # Ready False, which a busy node does seconds later: the drain counts from there, not from the write.
        if not await _until(ctx, namespace, pod, lambda o: not pod_ready(o)):
            await _admit(ctx, namespace, pod, started)
            break
        await asyncio.sleep(ctx.settings.endpoint_drain_seconds)
        errors, lost = await _execute(ctx, body, urls, queue, routed)
        current = await ctx.kube.get("v1", "Pod", namespace, pod)
        if current is None:
            break
        seen = await observe(ctx.server, [current], ctx.resolve)
        here = {
            m: f
            for m, f in rollout.failures(plan, seen, _now(), errors, lost, per_pod=True).items()
            if m in models
        }
        if here:
            undo = [a for m in here for a in rollout.rollback(plan.models[m], seen, overrides.get(m))]
            for model, failure in here.items():
                events.post(
                    body,
                    type="Warning",
                    reason="BlockedByFailedLoad",
                    message=f"{model}: {failure.message} (pod {pod}); rolling back",
                )
            await _execute(ctx, body, urls, undo, routed)
            failed.update(here)
        wait = ctx.settings.load_timeout
        admitted = await _admit(ctx, namespace, pod, started, wait)
        if not admitted or not await _until(ctx, namespace, pod, pod_ready, wait) or here:
            break
    return failed


async def _until(
    ctx: OperatorContext,
    namespace: str,
    pod: str,
    check: Callable[[dict[str, Any]], bool],
    wait: float | None = None,
) -> bool:
    """Poll the Pod object until ``check`` holds (True) or it is gone or ``wait`` seconds (default: the
    load timeout) passed (False): the kubelet reports readiness within its probe period."""
    deadline = asyncio.get_running_loop().time() + (ctx.settings.load_timeout if wait is None else wait)
    while True:
        current = await ctx.kube.get("v1", "Pod", namespace, pod)
        if current is None:
            return False
        if check(current):
            return True
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(0.2)


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
            await _load(ctx, url, action)
            pinned = f", default {action.default_version}" if action.default_version is not None else ""
            message = f"{action.model} versions {list(action.versions)} on pod {action.pod}{pinned}"
            message += _describe(action.routing)
    except ServerCallError as exc:
        verb = "unload" if unload else "load"
        events.post(
            body,
            type="Warning",
            reason="ModelUnloadFailed" if unload else "ModelLoadFailed",
            message=f"{action.model} {verb} on pod {action.pod}: {exc.message}",
        )
        return exc
    events.post(body, type="Normal", reason="ModelUnloaded" if unload else "ModelLoaded", message=message)
    return None


async def _load(ctx: OperatorContext, url: str, action: Load) -> None:
    """Load with exactly ``action.versions``, the spec's override, the pinned default and the routing
    (canary weights, mirror) in one request: the server merges override and version policy into the
    repository's ``config.pbtxt`` (Naiad's ``config_override`` load parameter) and re-reads the files, so
    changed content is picked up and is never served, not even for a moment, without its pin and
    override."""
    if action.replace:  # perPod: the old versions go before the new ones load
        await ctx.server.unload(url, action.model)
    override = rollout.load_override(action.versions, action.config_override)
    routing = action.routing
    parameters = None if routing is None else routing_parameters(dict(routing.weights), routing.mirror)
    await ctx.server.load(url, action.model, override, action.default_version, parameters)


def _describe(routing: Routing | None) -> str:
    if routing is None:
        return ""
    weights = ", ".join(f"v{v} {w}%" for v, w in routing.weights) or "none"
    mirror = f", mirror {routing.mirror[1]}% to v{routing.mirror[0]}" if routing.mirror else ""
    return f", weights {weights}{mirror}"
