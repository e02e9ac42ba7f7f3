"""Model rollouts on running pods: make before break, decided from spec, status and pod indexes.

For every model the operator compares three things: the *target* (the spec's version policy applied to
the repository snapshot, each version with its content hash), the *active* record in status (what was
last rolled out everywhere) and what each ready pod's repository index says is loaded. Then:

1. **Load** on every pod the union of active and target versions (old ones stay loaded and pinned as the
   default while the new ones load), and any model that is new.
2. **Switch**: once the new versions are READY on every pod, pin the new default version everywhere.
3. **Unload**: load only the target versions (dropping the old), and unload models no longer wanted.

Between stages the caller re-reads the indexes and asks :func:`failures`; a model whose new versions did
not come up on every pod is rolled back (:func:`rollback`) and recorded as blocked, so it is not retried
until the repository offers different content. Models whose target equals their active record are not
touched, except to repair drift on a pod (a restarted pod, a model unloaded by hand).

The plan is data; the stages run in ``handlers`` through ``k8s``. The operator keeps no memory between
passes beyond status, so a pass interrupted anywhere is simply planned again from what pods report.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from naiad_operator.api.inferenceservice import Failure, ModelSpec, ModelStatus
from naiad_operator.api.modelrepository import ModelRepositoryStatus
from naiad_operator.api.observed import PodObservation
from naiad_operator.reconcile import placement
from naiad_operator.reconcile.versions import InvalidPolicy, select_versions


@dataclass(frozen=True, slots=True)
class Load:
    """Load ``model`` on ``pod`` with exactly ``versions`` and ``default_version`` pinned.

    ``fresh`` says content of an already-loaded version changed, so the server must re-read it from the
    repository instead of the config it holds."""

    pod: str
    model: str
    versions: tuple[int, ...]
    default_version: int | None
    fresh: bool = False
    config_override: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Unload:
    pod: str
    model: str


Action = Load | Unload


class StageKind(StrEnum):
    LOAD = "Load"
    SWITCH = "Switch"
    UNLOAD = "Unload"


@dataclass(frozen=True, slots=True)
class Stage:
    kind: StageKind
    actions: tuple[Action, ...]


class Change(StrEnum):
    STEADY = "Steady"  # target == active: only drift repair
    ROLLOUT = "Rollout"  # target != active: the three stages
    BLOCKED = "Blocked"  # this target already failed: hold the active versions
    INVALID = "Invalid"  # the spec cannot be met by the snapshot
    WAITING = "Waiting"  # the repository has no snapshot yet


@dataclass(frozen=True, slots=True)
class ModelPlan:
    name: str
    change: Change
    target: dict[int, str] = field(default_factory=dict)
    active: dict[int, str] = field(default_factory=dict)
    keep: tuple[int, ...] = ()
    old_default: int | None = None
    new_default: int | None = None
    message: str = ""
    placed: frozenset[str] | None = None
    """The actionable pods that should hold the model (``placement``); None: every pod."""
    on_demand: bool = False
    """``placement: onDemand``: no pod holds it ahead, servers load it when asked."""

    def holds_here(self, pod: str) -> bool:
        """Whether ``pod`` is one of the pods this model is placed on."""
        return self.placed is None or pod in self.placed

    @property
    def target_versions(self) -> tuple[int, ...]:
        return tuple(sorted(self.target))

    @property
    def fresh(self) -> bool:
        """Some version keeps its number but changes content (or config): it must be re-read."""
        return any(self.active[v] != h for v, h in self.target.items() if v in self.active)


@dataclass(frozen=True, slots=True)
class Plan:
    models: dict[str, ModelPlan]
    stages: tuple[Stage, ...]
    unwanted: tuple[str, ...] = ()

    def stage(self, kind: StageKind) -> Stage | None:
        return next((s for s in self.stages if s.kind is kind), None)


def actionable(pods: Sequence[PodObservation]) -> list[PodObservation]:
    """Pods the operator may act on: Ready in Kubernetes and answering their index. A starting pod
    loads its models itself (``--load-model``); it is repaired once it is Ready."""
    return [p for p in pods if p.ready and p.reporting]


def plan_model(spec: ModelSpec, snapshot: Mapping[int, str] | None, record: ModelStatus | None) -> ModelPlan:
    """What to do about one listed model, before looking at pods."""
    if snapshot is None:
        return ModelPlan(spec.name, Change.INVALID, message=f"model '{spec.name}' is not in the repository")
    try:
        versions = select_versions(spec.version_policy, snapshot)
    except InvalidPolicy as exc:
        return ModelPlan(spec.name, Change.INVALID, message=f"model '{spec.name}': {exc}")
    target = {v: snapshot[v] for v in versions}
    active = dict(record.content_hashes) if record is not None else {}
    old_default = record.default_version if record is not None and active else None
    if record is not None and record.blocked_hashes == target and active != target:
        return ModelPlan(
            spec.name, Change.BLOCKED, target, active, tuple(sorted(active)), old_default, old_default
        )
    if active == target:
        return ModelPlan(
            spec.name, Change.STEADY, target, active, tuple(versions), max(versions), max(versions)
        )
    keep = tuple(sorted(set(active) | set(target)))
    return ModelPlan(spec.name, Change.ROLLOUT, target, active, keep, old_default, max(versions))


def plan(
    models: Sequence[ModelSpec],
    snapshot: Mapping[str, Mapping[int, str]] | None,
    records: Mapping[str, ModelStatus],
    pods: Sequence[PodObservation],
) -> Plan:
    """Every stage for this pass, across all models: all loads first, then switches, then unloads.
    ``snapshot`` (model -> version -> content hash) is None while the repository has none: then
    nothing is touched, not even models the spec no longer lists."""
    if snapshot is None:
        return Plan(
            {
                m.name: ModelPlan(
                    m.name, Change.WAITING, message="waiting for the repository's first snapshot"
                )
                for m in models
            },
            (),
        )
    ready = actionable(pods)
    plans: dict[str, ModelPlan] = {}
    loads: list[Action] = []
    switches: list[Action] = []
    unloads: list[Action] = []
    for spec in models:
        placed = placement.chosen(spec, [p.name for p in ready])
        mp = replace(
            plan_model(spec, snapshot.get(spec.name), records.get(spec.name)),
            placed=placed,
            on_demand=spec.on_demand,
        )
        plans[spec.name] = mp
        override = spec.config_override
        if mp.change is Change.INVALID or spec.on_demand:
            continue  # an onDemand model is loaded (and evicted) by the servers themselves
        chosen = [p for p in ready if mp.holds_here(p.name)]
        # a pod no longer chosen (the fleet scaled, k changed) lets its copy go, but only once every
        # chosen pod holds one (make before break: a later pass unloads it)
        if all(p.ready_versions(spec.name) for p in chosen):
            unloads += [
                Unload(p.name, spec.name) for p in ready if not mp.holds_here(p.name) and p.holds(spec.name)
            ]
        if mp.change in (Change.STEADY, Change.BLOCKED):
            if not mp.keep:  # blocked before it ever loaded: nothing to hold
                continue
            for pod in chosen:
                if pod.ready_versions(spec.name) != frozenset(mp.keep):
                    loads.append(Load(pod.name, spec.name, mp.keep, mp.new_default, False, override))
            continue
        done = _past_switch(spec.name, mp, chosen)
        first_default = mp.old_default if mp.active and not done else mp.new_default
        for pod in chosen:
            if pod.name in done:
                continue
            if mp.fresh or pod.ready_versions(spec.name) != frozenset(mp.keep):
                loads.append(Load(pod.name, spec.name, mp.keep, first_default, mp.fresh, override))
        if mp.active and mp.old_default != mp.new_default:
            switches += [
                Load(p.name, spec.name, mp.keep, mp.new_default, False, override)
                for p in chosen
                if p.name not in done
            ]
        if set(mp.keep) != set(mp.target):
            unloads += [
                Load(p.name, spec.name, mp.target_versions, mp.new_default, False, override) for p in chosen
            ]
    wanted = {m.name for m in models}
    unwanted = sorted({m for p in ready for m in p.models if m not in wanted and p.holds(m)})
    unloads += [Unload(p.name, m) for m in unwanted for p in ready if p.holds(m)]
    stages = tuple(
        Stage(kind, tuple(actions))
        for kind, actions in (
            (StageKind.LOAD, loads),
            (StageKind.SWITCH, switches),
            (StageKind.UNLOAD, unloads),
        )
        if actions
    )
    return Plan(plans, stages, tuple(unwanted))


def _past_switch(model: str, mp: ModelPlan, pods: Sequence[PodObservation]) -> frozenset[str]:
    """Pods that already dropped the old versions, when an earlier pass (an operator that died before it
    recorded the outcome) got as far as the Unload stage; empty otherwise.

    Old versions go only after the new default was pinned on every pod, so once one pod dropped them
    the switch is behind us: the rest of the rollout pins the new default (pinning the old one again
    sent answers back to the old version) and leaves those pods alone (loading the union again on
    them instantiated an old version a second time)."""
    retired = set(mp.active) - set(mp.target)
    if not retired:
        return frozenset()
    return frozenset(
        p.name
        for p in pods
        if set(mp.target) <= p.ready_versions(model) and not retired & p.ready_versions(model)
    )


def target_snapshot(
    pin: str | None,
    repository: ModelRepositoryStatus | None,
    records: Mapping[str, ModelStatus],
    pods: Sequence[PodObservation],
) -> dict[str, dict[int, str]] | None:
    """model -> version -> content hash of the snapshot to serve; None while there is none yet."""
    if repository is None or not repository.is_ready():
        return None
    if pin and pin != repository.snapshot.current:
        return pinned_snapshot(pin, records, pods)
    return {m.name: m.hashes() for m in repository.models}


def pinned_snapshot(
    snapshot_id: str, records: Mapping[str, ModelStatus], pods: Sequence[PodObservation]
) -> dict[str, dict[int, str]]:
    """The snapshot map for a pin that is not the repository's current snapshot.

    Status lists hashes only for the current snapshot, so a pinned older one is described by what was
    rolled out from it (the active records) or else by what the pods, which read the pinned folder,
    report as loaded. Nothing is rolled in place for a pin: changing a pin restarts the pods.
    """
    result: dict[str, dict[int, str]] = {}
    for name, record in records.items():
        if record.content_hashes:
            result[name] = dict(record.content_hashes)
    for pod in actionable(pods):
        for name in pod.models:
            if name not in result:
                versions = pod.ready_versions(name)
                if versions:
                    result[name] = {v: snapshot_id for v in versions}
    return result


def failures(
    plan_: Plan,
    pods: Sequence[PodObservation],
    now: str,
    errors: Mapping[tuple[str, str], str] | None = None,
    lost: Collection[str] = (),
) -> dict[str, Failure]:
    """Rolling-out models whose target versions are not all READY on every actionable pod, after the
    Load stage; each with the first failing pod and the server's reason: from its index, else from the
    error its load call answered (``errors``, by pod and model), since a failed load may leave nothing
    in the index.

    A pod in ``lost`` never answered its load (it died or restarted mid-call): that says nothing about
    the model, so unless its index names a failed target version it is not blamed (blaming it blocked
    the new content for good); the level-triggered passes bring it in line once it is Ready again."""
    result: dict[str, Failure] = {}
    for name, mp in plan_.models.items():
        if mp.change is not Change.ROLLOUT:
            continue
        for pod in actionable(pods):
            if not mp.holds_here(pod.name):
                continue
            missing = [v for v in mp.target_versions if v not in pod.ready_versions(name)]
            if not missing:
                continue
            reasons = pod.failed_versions(name)
            if pod.name in lost and not any(v in reasons for v in missing):
                continue
            version = next((v for v in missing if v in reasons), missing[0])
            message = (
                reasons.get(version)
                or (errors or {}).get((pod.name, name))
                or f"version {version} is not ready after the load"
            )
            result[name] = Failure(
                reason="ModelLoadFailed", message=message, pod=pod.name, version=version, time=now
            )
            break
    return result


def rollback(
    mp: ModelPlan, pods: Sequence[PodObservation], override: Mapping[str, Any] | None
) -> list[Action]:
    """Undo a failed Load stage for one model.

    A model that was never active is unloaded again where it came up, so the fleet stays uniform. A
    model with active versions gets exactly those back, with the old default pinned, on every pod where
    the set differs; when an active version changed content in the snapshot, reloading it would read
    the new (failed) content, so it is left to the server, which keeps the old copy serving after a
    failed reload.
    """
    ready = actionable(pods)
    if not mp.active:
        return [Unload(p.name, mp.name) for p in ready if p.holds(mp.name)]
    if mp.fresh:
        return []
    versions = tuple(sorted(mp.active))
    return [
        Load(p.name, mp.name, versions, mp.old_default, False, override)
        for p in ready
        if mp.holds_here(p.name) and p.ready_versions(mp.name) != frozenset(versions)
    ]


def without(stage: Stage, models: set[str]) -> Stage:
    """The stage minus the actions on ``models`` (those rolled back after a failed Load)."""
    return Stage(stage.kind, tuple(a for a in stage.actions if a.model not in models))


def load_config(
    base: Mapping[str, Any] | None, versions: Sequence[int], override: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The ``config`` parameter of a load: the model's current config with the version policy set to
    exactly ``versions`` and the spec's override merged in. None when there is no config to start from
    (the model is not loaded on that pod): the caller loads it plain first."""
    if base is None:
        return None
    config = _merge(dict(base), dict(override or {}))
    config["version_policy"] = {"specific": {"versions": [int(v) for v in versions]}}
    return config


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = _merge(dict(base[key]), value)
        else:
            base[key] = value
    return base
