"""Canary and shadow rollouts: how requests that name no version are split between loaded versions.

A model with ``rollout.strategy: canary`` whose rollout changes its default version keeps both versions
loaded after the Load stage (as the plain rollout does between Load and Switch) and, instead of switching,
walks ``steps``: at each one every pod gets ``version_weights`` {old: 100 - w, new: w}; after
``pauseSeconds`` the new version's traffic in the step (the difference between two scrapes of every
pod's own counters, :mod:`reconcile.analysis`) is judged. A pass moves to the next step, promotes after
the last one (the plain Switch and Unload stages, weights cleared), or aborts: weights cleared (the old
version, still pinned as the default, gets every request), then the new version unloaded, and the target
recorded as blocked like a failed load. Each step and its evidence are kept in status.

Nothing here waits: a decision says when the next pass is due (``wake_at``) and the handlers schedule
it off any handler, so a long pause holds nothing up. The step, its start and its outcome live in
status; the baseline scrape of the running step is the operator's memory, and when it is gone (a
restart) the step's window starts again at the next pass rather than guessing.

``mirror`` is simpler: the version is loaded beside the served ones (``rollout.plan_model``) and every
pod gets the ``mirror`` parameter; its traffic on the pods is reported in status.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from naiad_operator.api.inferenceservice import (
    CanaryPhase,
    CanaryStatus,
    CanaryStep,
    Failure,
    InferenceServiceStatus,
    MirrorStatus,
    ModelSpec,
    ModelStatus,
    RolloutStrategy,
    StepVerdict,
)
from naiad_operator.api.observed import PodObservation
from naiad_operator.reconcile import analysis, rollout
from naiad_operator.reconcile.analysis import Scrape
from naiad_operator.reconcile.rollout import Action, Change, Load, ModelPlan, Plan, Routing, Stage, StageKind

#: How soon to look again while a canary waits for its Load stage or for traffic.
RECHECK = timedelta(seconds=2)


@dataclass(frozen=True, slots=True)
class Baseline:
    """The scrape a canary step's window starts from (operator memory, by model)."""

    step: int
    started_at: str
    scrape: Scrape


@dataclass(frozen=True, slots=True)
class Decision:
    """What one model's traffic split does this pass."""

    model: str
    routing: Routing | None = None
    """Wanted on every pod (None: routing of this model is left alone)."""
    canary: CanaryStatus | None = None
    writes_canary: bool = False
    """Whether ``canary`` replaces the status record (None then removes it)."""
    hold: bool = False
    """A canary is running: no Switch or Unload yet."""
    abort: Failure | None = None
    wake_at: datetime | None = None
    event: tuple[str, str, str] | None = None
    """(type, reason, message) of an Event to post."""
    new_baseline: bool = False
    """A step began: its window starts at the scrape taken after this pass's actions."""


def wants_scrape(models: Sequence[ModelSpec], plan_: Plan) -> bool:
    """Whether any model needs the pods' metrics this pass: a mirror, or a canary rollout under way."""
    return any(
        m.mirror is not None or (m.name in plan_.models and _is_canary(m, plan_.models[m.name]))
        for m in models
    )


def decide(
    spec: ModelSpec,
    mp: ModelPlan,
    record: ModelStatus | None,
    pods: Sequence[PodObservation],
    now: datetime,
    baseline: Baseline | None,
    scrape: Scrape | None,
) -> Decision:
    """The traffic split of one model this pass (``pods``: the actionable ones; ``scrape``: their
    counters now, None when none was taken)."""
    if mp.change in (Change.WAITING, Change.INVALID):
        return Decision(spec.name)  # nothing is touched meanwhile, a running canary included
    pods = [p for p in pods if mp.holds_here(p.name)]  # {copies: k}: only the pods chosen to hold it
    mirror = (spec.mirror.version, spec.mirror.percent) if spec.mirror is not None else None
    previous = record.canary if record is not None else None
    running = previous is not None and previous.phase is CanaryPhase.PROGRESSING
    had_routing = running or (record is not None and record.mirror is not None) or mirror is not None
    plain = Routing((), mirror) if had_routing else None
    if not _is_canary(spec, mp):
        if running:  # the strategy or the target changed under it: stop splitting, forget it
            return Decision(spec.name, plain, None, writes_canary=True)
        return Decision(spec.name, plain)
    old, new = mp.old_default, mp.new_default
    assert old is not None and new is not None
    steps = spec.rollout.steps or [100]
    pause = timedelta(seconds=spec.rollout.pause_seconds)
    if previous is not None and previous.target == mp.target and previous.phase is CanaryPhase.PROMOTED:
        return Decision(spec.name, Routing((), mirror))  # promoted: the Switch and Unload stages finish
    if previous is None or not running or previous.target != mp.target:
        if not pods or any(not set(mp.keep) <= p.ready_versions(spec.name) for p in pods):
            # the Load stage runs (or waits for pods) first; the old default stays pinned meanwhile
            return Decision(spec.name, Routing((), mirror), hold=True, wake_at=now + RECHECK)
        first = CanaryStatus(
            from_version=old,
            to_version=new,
            target=dict(mp.target),
            step=0,
            steps=[CanaryStep(weight=steps[0], started_at=_format(now))],
        )
        return Decision(
            spec.name,
            _weights(old, new, steps[0], mirror),
            first,
            writes_canary=True,
            hold=True,
            wake_at=now + pause,
            event=("Normal", "CanaryStep", _step_message(spec.name, first, steps)),
            new_baseline=True,
        )
    assert previous is not None
    index = min(previous.step, len(steps) - 1)
    current = previous.steps[-1]
    weight = steps[index]
    routing = _weights(old, new, weight, mirror)
    started = _parse(current.started_at)
    if baseline is None or (baseline.step, baseline.started_at) != (previous.step, current.started_at):
        # the window's first scrape is gone (the operator restarted): the step starts over from now
        restarted = _replace_last(previous, replace_step(current, started_at=_format(now), weight=weight))
        return Decision(
            spec.name,
            routing,
            restarted,
            writes_canary=True,
            hold=True,
            wake_at=now + pause,
            new_baseline=True,
        )
    if now < started + pause:
        return Decision(spec.name, routing, hold=True, wake_at=started + pause)
    if not scrape:  # no pod answered its metrics: never judge on nothing, look again shortly
        return Decision(spec.name, routing, hold=True, wake_at=now + RECHECK)
    evidence = analysis.window(baseline.scrape, scrape, spec.name, new).evidence()
    old_requests = analysis.window(baseline.scrape, scrape, spec.name, old).requests
    total = evidence.requests + old_requests
    share = round(evidence.requests / total, 4) if total else None
    checks = spec.rollout.analysis
    if evidence.requests < checks.min_requests:
        return Decision(spec.name, routing, hold=True, wake_at=now + RECHECK)
    fault = analysis.judge(evidence, checks)
    finished = replace_step(
        current,
        finished_at=_format(now),
        verdict=StepVerdict.FAILED if fault else StepVerdict.PASSED,
        evidence=evidence,
        share=share,
        message=fault,
    )
    ended = _replace_last(previous, finished)
    said = f"{spec.name}: version {new} at {weight}%: {analysis.describe(evidence)}"
    if fault is not None:
        aborted = ended.model_copy(update={"phase": CanaryPhase.ABORTED})
        failure = Failure(
            reason="CanaryAnalysisFailed",
            message=f"canary of version {new} at {weight}%: {fault}",
            version=new,
            time=_format(now),
        )
        event = ("Warning", "CanaryAborted", f"{said}; {fault}: rolling back to version {old}")
        return Decision(spec.name, Routing((), mirror), aborted, True, abort=failure, event=event)
    if previous.step + 1 < len(steps):
        step = previous.step + 1
        moved = ended.model_copy(
            update={
                "step": step,
                "steps": [*ended.steps, CanaryStep(weight=steps[step], started_at=_format(now))],
            }
        )
        message = f"{said}; passed. {_step_message(spec.name, moved, steps)}"
        return Decision(
            spec.name,
            _weights(old, new, steps[step], mirror),
            moved,
            writes_canary=True,
            hold=True,
            wake_at=now + pause,
            event=("Normal", "CanaryStep", message),
            new_baseline=True,
        )
    promoted = ended.model_copy(update={"phase": CanaryPhase.PROMOTED})
    event = ("Normal", "CanaryPromoted", f"{said}; passed: version {new} becomes the default")
    return Decision(spec.name, Routing((), mirror), promoted, writes_canary=True, event=event)


def _is_canary(spec: ModelSpec, mp: ModelPlan) -> bool:
    """A canary applies to a rollout that moves the default from one loaded version to another."""
    return (
        spec.rollout.strategy is RolloutStrategy.CANARY
        and mp.change is Change.ROLLOUT
        and mp.old_default is not None
        and mp.new_default is not None
        and mp.old_default != mp.new_default
        and mp.old_default in mp.active
    )


def apply(
    plan_: Plan,
    decisions: Mapping[str, Decision],
    pods: Sequence[PodObservation],
    applied: Mapping[tuple[str, str], Routing],
    overrides: Mapping[str, Mapping[str, Any] | None],
) -> Plan:
    """The plan with the traffic split woven in: every action on a model carries its routing, held
    canaries lose their Switch and Unload actions, aborted ones get the rollback instead (weights off
    first, in the Route stage, then the old versions only), and pods whose routing differs from what
    was last set there (``applied``, by pod and model) get a Route action."""
    stages = {s.kind: list(s.actions) for s in plan_.stages}
    touched: set[tuple[str, str]] = set()
    for kind, actions in stages.items():
        if kind is StageKind.LOAD:
            stages[kind] = [_routed(a, decisions) for a in actions]
            touched |= {(a.pod, a.model) for a in actions}
    route: list[Action] = []
    for name, decision in decisions.items():
        mp = plan_.models.get(name)
        if mp is None or decision.routing is None or mp.change in (Change.INVALID, Change.WAITING):
            continue
        if decision.abort is not None:
            for kind in (StageKind.SWITCH, StageKind.UNLOAD):
                stages[kind] = [a for a in stages.get(kind, []) if a.model != name]
            stages.setdefault(StageKind.UNLOAD, []).extend(
                replace(a, routing=decision.routing) if isinstance(a, Load) else a
                for a in rollout.rollback(mp, pods, overrides.get(name))
            )
        elif decision.hold:
            for kind in (StageKind.SWITCH, StageKind.UNLOAD):
                stages[kind] = [a for a in stages.get(kind, []) if a.model != name]
        default = mp.old_default if decision.hold or decision.abort else mp.new_default
        switching = {a.pod for a in stages.get(StageKind.SWITCH, []) if a.model == name}
        for pod in rollout.actionable(pods):
            if (pod.name, name) in touched or pod.name in switching or not mp.keep:
                continue
            if not set(mp.keep) <= pod.ready_versions(name):
                continue
            if decision.abort is None and applied.get((pod.name, name)) == decision.routing:
                continue
            route.append(Load(pod.name, name, mp.keep, default, False, overrides.get(name), decision.routing))
    stages[StageKind.ROUTE] = route
    for kind in (StageKind.SWITCH, StageKind.UNLOAD, StageKind.PER_POD):
        stages[kind] = [_routed(a, decisions) for a in stages.get(kind, [])]
    ordered = tuple(
        Stage(kind, tuple(stages[kind]))
        for kind in (StageKind.LOAD, StageKind.ROUTE, StageKind.SWITCH, StageKind.UNLOAD, StageKind.PER_POD)
        if stages.get(kind)
    )
    return replace(plan_, stages=ordered)


def _routed(action: Action, decisions: Mapping[str, Decision]) -> Action:
    decision = decisions.get(action.model)
    if not isinstance(action, Load) or decision is None or decision.routing is None:
        return action
    return replace(action, routing=decision.routing)


def mirror_status(
    spec: ModelSpec, scrape: Scrape | None, previous: MirrorStatus | None
) -> MirrorStatus | None:
    """The mirror version's traffic on the current pods, since each loaded it (or the last known
    figures while no scrape answered)."""
    if spec.mirror is None:
        return None
    if not scrape:
        return previous
    evidence = analysis.window(None, scrape, spec.name, spec.mirror.version).evidence()
    return MirrorStatus(version=spec.mirror.version, percent=spec.mirror.percent, evidence=evidence)


def record(
    status: InferenceServiceStatus,
    decisions: Mapping[str, Decision],
    mirrors: Mapping[str, MirrorStatus | None],
) -> InferenceServiceStatus:
    """Status with each model's canary record and mirror figures written in."""
    models = []
    for model in status.models:
        update: dict[str, object] = {}
        decision = decisions.get(model.name)
        if decision is not None and decision.writes_canary:
            update["canary"] = decision.canary
        if model.name in mirrors:
            update["mirror"] = mirrors[model.name]
        models.append(model.model_copy(update=update) if update else model)
    return status.model_copy(update={"models": models})


def next_wake(decisions: Mapping[str, Decision]) -> datetime | None:
    return min((d.wake_at for d in decisions.values() if d.wake_at is not None), default=None)


def replace_step(step: CanaryStep, **update: object) -> CanaryStep:
    return step.model_copy(update=update)


def _replace_last(canary: CanaryStatus, step: CanaryStep) -> CanaryStatus:
    return canary.model_copy(update={"steps": [*canary.steps[:-1], step]})


def _weights(old: int, new: int, weight: int, mirror: tuple[int, int] | None) -> Routing:
    return Routing(((old, 100 - weight), (new, weight)), mirror)


def _step_message(model: str, canary: CanaryStatus, steps: Sequence[int]) -> str:
    return (
        f"{model}: step {canary.step + 1}/{len(steps)}: {steps[canary.step]}% of requests naming no "
        f"version go to version {canary.to_version}"
    )


def _format(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
