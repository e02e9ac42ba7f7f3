"""InferenceService status: per-model, per-pod truth from the servers' own indexes.

``Servable`` (some version of every required model answers on some Ready pod: traffic works) is kept
apart from ``Ready`` (the spec is fully realized everywhere), so a rollout in progress does not read as an
outage (kserve#5443). Everything here is a function of the pass's observations and the previous status,
and a pass that observes nothing new computes an identical status, so it writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from naiad_operator.api.base import Condition
from naiad_operator.api.inferenceservice import (
    Copies,
    Failure,
    InferenceServiceSpec,
    InferenceServiceStatus,
    ModelState,
    ModelStatus,
    Phase,
    ReplicaState,
    SnapshotRef,
    TransitionStatus,
)
from naiad_operator.api.modelrepository import ModelRepositoryStatus
from naiad_operator.api.observed import DeploymentObservation, PodObservation, PodProblem, VersionState
from naiad_operator.reconcile import placement
from naiad_operator.reconcile.conditions import condition, merge_conditions
from naiad_operator.reconcile.rollout import Change, ModelPlan, Plan, actionable


@dataclass(frozen=True, slots=True)
class Observed:
    """Everything one pass saw, after its actions ran."""

    pods: Sequence[PodObservation]
    deployment: DeploymentObservation | None
    repository: ModelRepositoryStatus | None
    failures: Mapping[str, Failure]


def model_status(
    mp: ModelPlan,
    required: bool,
    previous: ModelStatus | None,
    pods: Sequence[PodObservation],
    failure: Failure | None,
    now: str,
    limit: int,
) -> ModelStatus:
    """One model's entry; also advances the rollout record (active versions) once every pod is done."""
    record = previous or ModelStatus(name=mp.name)
    update: dict[str, object] = {"required": required}
    everywhere = pods
    held_by = placement.holders(mp.name, pods)
    if mp.on_demand:  # the pods that loaded it when asked are the ones to report on
        held = {h.pod for h in held_by}
        pods = [p for p in pods if p.name in held]
    elif mp.placed is not None:  # {copies: k}: the pods chosen to hold it
        pods = [p for p in pods if mp.holds_here(p.name)]
    ready_pods = actionable(pods)
    blocked = mp.change is Change.BLOCKED or failure is not None
    serving = tuple(sorted(mp.active)) if blocked else mp.target_versions
    if failure is not None:
        update["blocked_hashes"] = dict(mp.target)
    done = (
        mp.change in (Change.ROLLOUT, Change.STEADY)
        and failure is None
        and bool(ready_pods)
        and all(p.ready_versions(mp.name) == frozenset(mp.target) for p in ready_pods)
    )
    if mp.on_demand:  # nothing to roll out: any ready pod loads the repository's versions when asked
        steady = mp.change in (Change.ROLLOUT, Change.STEADY)
        done = steady and failure is None and bool(actionable(everywhere))
    if done:
        update.update(
            active_versions=list(mp.target_versions),
            default_version=mp.new_default,
            content_hashes=dict(mp.target),
            blocked_hashes=None,
        )
    copies = _copies(mp.name, serving, pods)
    if mp.change is Change.INVALID:
        transition = TransitionStatus.INVALID_SPEC
    elif blocked:
        transition = TransitionStatus.BLOCKED_BY_FAILED_LOAD
    elif done:
        transition = TransitionStatus.UP_TO_DATE
    else:
        transition = TransitionStatus.IN_PROGRESS
    if mp.on_demand and done:
        state = ModelState.LOADED  # servable: the pod a request reaches loads it
    elif not pods:
        state = ModelState.PENDING
    elif copies.failed or (blocked and not mp.active):
        state = ModelState.FAILED_TO_LOAD
    elif copies.ready and copies.ready == copies.desired:
        state = ModelState.LOADED
    elif copies.loading or transition is TransitionStatus.IN_PROGRESS:
        state = ModelState.LOADING
    else:
        state = ModelState.UNAVAILABLE
    update.update(
        transition_status=transition,
        state=state,
        target_versions=list(mp.target_versions),
        copies=copies,
        replicas=_replicas(mp.name, serving, pods, limit),
        held_by=held_by[:limit],
        last_failure=_last_failure(record.last_failure, failure, mp.name, pods, now),
    )
    if mp.change is Change.INVALID:
        update["last_failure"] = _same_or_new(
            record.last_failure, Failure(reason="InvalidSpec", message=mp.message, time=now)
        )
    return record.model_copy(update=update)


def _copies(model: str, serving: Sequence[int], pods: Sequence[PodObservation]) -> Copies:
    copies = Copies(desired=len(pods))
    wanted = frozenset(serving)
    for pod in pods:
        if not pod.reporting:
            continue
        states = pod.models.get(model, {})
        if wanted and wanted <= pod.ready_versions(model):
            copies.ready += 1
        elif any(states.get(v) is not None and states[v].state is VersionState.UNAVAILABLE for v in wanted):
            copies.failed += 1
        elif any(states.get(v) is not None and states[v].state is VersionState.LOADING for v in wanted):
            copies.loading += 1
    return copies


def _replicas(
    model: str, serving: Sequence[int], pods: Sequence[PodObservation], limit: int
) -> list[ReplicaState]:
    """Per-pod state, the pods that need attention first, at most ``limit`` entries."""
    entries: list[tuple[int, ReplicaState]] = []
    wanted = frozenset(serving)
    for pod in pods:
        loaded = sorted(pod.ready_versions(model))
        reasons = pod.failed_versions(model)
        if pod.problem is not None and not pod.ready:
            entry = ReplicaState(pod=pod.name, state=pod.problem.reason, reason=pod.problem.message)
        elif not pod.reporting:
            entry = ReplicaState(
                pod=pod.name, state="NotReporting", reason=pod.index_error or "no address yet"
            )
        elif wanted and wanted <= frozenset(loaded):
            entry = ReplicaState(pod=pod.name, state="Ready", versions=loaded)
        elif reasons:
            version = min(reasons)
            entry = ReplicaState(
                pod=pod.name, state="Failed", versions=loaded, reason=f"version {version}: {reasons[version]}"
            )
        elif pod.loading_versions(model):
            entry = ReplicaState(pod=pod.name, state="Loading", versions=loaded)
        else:
            entry = ReplicaState(pod=pod.name, state="NotLoaded", versions=loaded)
        entries.append((0 if entry.state != "Ready" else 1, entry))
    entries.sort(key=lambda e: (e[0], e[1].pod))
    return [e for _, e in entries[:limit]]


def _last_failure(
    previous: Failure | None, failure: Failure | None, model: str, pods: Sequence[PodObservation], now: str
) -> Failure | None:
    """The newest failure: this pass's rollback, else a failed version a pod reports, else the last one
    known. A failure already recorded keeps its time, so re-reading it writes nothing."""
    if failure is not None:
        return _same_or_new(previous, failure)
    for pod in pods:
        reasons = pod.failed_versions(model)
        if reasons:
            version = min(reasons)
            seen = Failure(
                reason="ModelLoadFailed", message=reasons[version], pod=pod.name, version=version, time=now
            )
            return _same_or_new(previous, seen)
    return previous


def _same_or_new(previous: Failure | None, failure: Failure) -> Failure:
    if previous is not None and (previous.reason, previous.message, previous.pod, previous.version) == (
        failure.reason,
        failure.message,
        failure.pod,
        failure.version,
    ):
        return previous
    return failure


def service_status(
    name: str,
    namespace: str,
    generation: int,
    spec: InferenceServiceSpec,
    previous: InferenceServiceStatus,
    plan: Plan,
    observed: Observed,
    urls: tuple[str, str],
    selector: str,
    now: str,
    limit: int,
) -> InferenceServiceStatus:
    models = [
        model_status(
            plan.models[m.name],
            m.required,
            previous.model(m.name),
            observed.pods,
            observed.failures.get(m.name),
            now,
            limit,
        )
        for m in spec.models
    ]
    required = [m for m in models if m.required]
    ready_required = [
        m
        for m in required
        if m.transition_status is TransitionStatus.UP_TO_DATE and m.state is ModelState.LOADED
    ]
    deployment = observed.deployment or DeploymentObservation()
    repo = observed.repository
    conditions = _conditions(
        spec, generation, models, required, ready_required, deployment, repo, observed.pods
    )
    merged = merge_conditions(previous.conditions, conditions, now)
    target = spec.repository.snapshot or (repo.snapshot.current if repo is not None else None)
    all_done = all(m.transition_status is TransitionStatus.UP_TO_DATE for m in models)
    active = target if all_done and target else previous.snapshot.active
    return previous.model_copy(
        update={
            "observed_generation": generation,
            "phase": _phase(merged, models, observed.pods),
            "conditions": merged,
            "replicas": deployment.replicas,
            "ready_replicas": deployment.ready_replicas,
            "selector": selector,
            "url": urls[0],
            "grpc_address": urls[1],
            "models_ready": f"{len(ready_required)}/{len(required)}",
            "snapshot": SnapshotRef(active=active, target=target),
            "models": models,
        }
    )


def _conditions(
    spec: InferenceServiceSpec,
    generation: int,
    models: Sequence[ModelStatus],
    required: Sequence[ModelStatus],
    ready_required: Sequence[ModelStatus],
    deployment: DeploymentObservation,
    repo: ModelRepositoryStatus | None,
    pods: Sequence[PodObservation],
) -> list[Condition]:
    g = generation
    problem = next(((p.name, p.problem) for p in pods if p.problem is not None and not p.ready), None)
    if repo is None:
        repository = condition(
            "RepositoryReady", False, "NotFound", f"ModelRepository '{spec.repository.name}' not found", g
        )
    elif not repo.is_ready():
        repository = condition(
            "RepositoryReady",
            False,
            "NotSynced",
            f"ModelRepository '{spec.repository.name}' has no snapshot yet",
            g,
        )
    elif spec.repository.snapshot and spec.repository.snapshot not in repo.snapshot.available:
        repository = condition(
            "RepositoryReady",
            False,
            "SnapshotNotAvailable",
            f"snapshot {spec.repository.snapshot} is not among the kept snapshots",
            g,
        )
    else:
        repository = condition("RepositoryReady", True, "SnapshotAvailable", "", g)
    if spec.replicas == 0:
        server = condition("ServerAvailable", False, "ScaledToZero", "spec.replicas is 0", g)
    elif deployment.ready_replicas >= 1:
        counts = f"{deployment.ready_replicas}/{deployment.replicas} pods ready"
        says = f"; {problem[1].reason}: {_pod_says(problem)}" if problem is not None else ""
        server = condition("ServerAvailable", True, "PodsReady", counts + says, g)
    elif problem is not None:
        server = condition("ServerAvailable", False, problem[1].reason, _pod_says(problem), g)
    else:
        server = condition("ServerAvailable", False, "NoReadyPods", "no server pod is ready", g)
    not_ready = [m for m in required if m not in ready_required]
    if not not_ready:
        models_ready = condition(
            "ModelsReady", True, "AllLoaded", f"{len(required)} required models loaded", g
        )
    else:
        first = not_ready[0]
        models_ready = condition(
            "ModelsReady",
            False,
            first.transition_status.value,
            _describe(first) + (f" (and {len(not_ready) - 1} more)" if len(not_ready) > 1 else ""),
            g,
        )
    rolling = [m.name for m in models if m.transition_status is TransitionStatus.IN_PROGRESS]
    deploying = (
        deployment.observed_generation < deployment.generation
        or deployment.updated_replicas < deployment.replicas
    )
    if deployment.stalled:
        progressing = condition("Progressing", True, "ProgressDeadlineExceeded", deployment.stalled, g)
    elif rolling:
        progressing = condition("Progressing", True, "ModelRollout", "rolling out " + ", ".join(rolling), g)
    elif deploying and problem is not None:
        progressing = condition("Progressing", True, problem[1].reason, _pod_says(problem), g)
    elif deploying:
        progressing = condition("Progressing", True, "PodRollout", "server pods are being replaced", g)
    else:
        progressing = condition("Progressing", False, "Complete", "", g)
    ready_pods = actionable(pods)
    on_demand = {m.name for m in spec.models if m.on_demand}  # loaded by the first request that names it
    unservable = [
        m.name
        for m in required
        if m.name not in on_demand and not any(p.ready_versions(m.name) for p in ready_pods)
    ]
    if not unservable and ready_pods:
        servable = condition(
            "Servable", True, "ModelsServing", "every required model answers on a ready pod", g
        )
    else:
        servable = condition(
            "Servable",
            False,
            "ModelsUnavailable",
            "not served: " + (", ".join(unservable) or "no ready pod"),
            g,
        )
    parts = (repository, server, models_ready)
    if all(c.status == "True" for c in parts) and progressing.status == "False":
        ready = condition("Ready", True, "Ready", "", g)
    else:
        blocking = next(
            c for c in (*parts, progressing) if c.status != ("False" if c is progressing else "True")
        )
        if problem is not None and repository.status == "True" and blocking is not server:
            # a pod that cannot run is the first thing to fix, whatever it holds back
            blocking = condition("Ready", False, problem[1].reason, _pod_says(problem), g)
        ready = condition("Ready", False, blocking.reason, blocking.message, g)
    return [repository, server, models_ready, progressing, servable, ready]


def _pod_says(problem: tuple[str, PodProblem]) -> str:
    return f"pod {problem[0]}: {problem[1].message}"


def _describe(model: ModelStatus) -> str:
    if model.last_failure is not None and model.transition_status is not TransitionStatus.IN_PROGRESS:
        return f"{model.name}: {model.last_failure.message}"
    return f"{model.name}: {model.state.value} on {model.copies.ready}/{model.copies.desired} pods"


def _phase(
    conditions: Sequence[Condition], models: Sequence[ModelStatus], pods: Sequence[PodObservation]
) -> Phase:
    by_type = {c.type: c.status == "True" for c in conditions}
    stuck = any(
        m.required
        and m.transition_status in (TransitionStatus.BLOCKED_BY_FAILED_LOAD, TransitionStatus.INVALID_SPEC)
        for m in models
    )
    if by_type.get("Ready"):
        return Phase.READY
    if stuck:
        return Phase.DEGRADED if by_type.get("Servable") else Phase.FAILED
    if not pods:
        return Phase.PENDING
    return Phase.PROGRESSING
