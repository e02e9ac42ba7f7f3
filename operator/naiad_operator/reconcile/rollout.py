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
until something that matters changes (:mod:`.retry`). Models whose target equals their active record are
not touched, except to repair drift on a pod (a restarted pod, a model unloaded by hand).

The spec's ``configOverride`` is part of the target: its fingerprint is recorded with the active versions,
so a changed override alone rolls out (a reload with the new config on every pod; the server builds the
new instances before it retires the old ones). A pod held out of the Service by the operator's readiness
gate (:mod:`.readiness`: it started, and loaded plain ``config.pbtxt`` and the newest content) gets every
model loaded with override and pin whatever its versions, before its gate opens.

``perPod`` models (:class:`~naiad_operator.api.inferenceservice.RolloutStrategy`) never hold two sets of
versions in one pod: version changes on a serving pod go to the ``PerPod`` stage, where the caller takes
one pod at a time out of the endpoints, unloads, loads and puts it back.

The plan is data; the stages run in ``handlers`` through ``k8s``. The operator keeps no memory between
passes beyond status, so a pass interrupted anywhere is simply planned again from what pods report.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from naiad_operator.api.inferenceservice import Failure, ModelSpec, ModelStatus, RolloutStrategy
from naiad_operator.api.modelrepository import ModelRepositoryStatus
from naiad_operator.api.observed import PodObservation
from naiad_operator.reconcile import placement, retry
from naiad_operator.reconcile.retry import Attempt
from naiad_operator.reconcile.versions import InvalidPolicy, select_versions


@dataclass(frozen=True, slots=True)
class Routing:
    """How a pod splits the requests that name no version (Naiad's ``version_weights`` and ``mirror``
    load parameters): ``weights`` version -> weight, empty for none (the pinned default serves);
    ``mirror`` (version, percent) or None. A load carrying one sets exactly this on the pod."""

    weights: tuple[tuple[int, int], ...] = ()
    mirror: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class Load:
    """Load ``model`` on ``pod`` with exactly ``versions``, ``default_version`` pinned and the spec's
    ``config_override``.

    ``fresh`` says why a pod that already holds these versions is loaded again: content of a version
    changed under its number (every load re-reads the repository's files)."""

    pod: str
    model: str
    versions: tuple[int, ...]
    default_version: int | None
    fresh: bool = False
    config_override: Mapping[str, Any] | None = None
    routing: Routing | None = None
    """None: the load leaves the pod's routing of this model as it is."""
    replace: bool = False
    """Unload the model first, so the pod never holds old and new at once (``perPod``)."""


@dataclass(frozen=True, slots=True)
class Unload:
    pod: str
    model: str


Action = Load | Unload


class StageKind(StrEnum):
    LOAD = "Load"
    ROUTE = "Route"  # set how requests are split between loaded versions (canary, mirror)
    SWITCH = "Switch"
    UNLOAD = "Unload"
    PER_POD = "PerPod"  # one pod at a time: out of the endpoints, replaced, back in


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
    config: str | None = None
    """Fingerprint of the spec's override (the target's config)."""
    active_config: str | None = None
    """Fingerprint of the override every pod was last brought to."""
    strategy: RolloutStrategy = RolloutStrategy.BOTH
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
    def reconfigure(self) -> bool:
        """The override changed since the last rollout: every pod reloads with the new one."""
        return self.config != self.active_config

    @property
    def fresh(self) -> bool:
        """Some version keeps its number but changes content (or config): it must be re-read."""
        return any(self.active[v] != h for v, h in self.target.items() if v in self.active)


@dataclass(frozen=True, slots=True)
class Plan:
    models: dict[str, ModelPlan]
    stages: tuple[Stage, ...]
    unwanted: tuple[str, ...] = ()
    attempt: Attempt = field(default_factory=Attempt)
    admit: tuple[str, ...] = ()
    """Pods held out by the readiness gate that this pass prepares: their gate opens once every action
    on them succeeded."""

    def stage(self, kind: StageKind) -> Stage | None:
        return next((s for s in self.stages if s.kind is kind), None)


def actionable(pods: Sequence[PodObservation]) -> list[PodObservation]:
    """Pods the operator may act on: answering their index, and Ready in Kubernetes or held out only by
    the operator's readiness gate. A starting pod loads its models itself (``--load-model``); the
    operator takes over once its server is ready."""
    return [p for p in pods if p.up and p.reporting]


def serving(pods: Sequence[PodObservation]) -> list[PodObservation]:
    """Pods in the Service's endpoints (Ready) that answer their index."""
    return [p for p in pods if p.ready and p.reporting]


def plan_model(
    spec: ModelSpec,
    snapshot: Mapping[int, str] | None,
    record: ModelStatus | None,
    attempt: Attempt | None = None,
) -> ModelPlan:
    """What to do about one listed model, before looking at pods."""
    if snapshot is None:
        return ModelPlan(spec.name, Change.INVALID, message=f"model '{spec.name}' is not in the repository")
    try:
        versions = select_versions(spec.version_policy, snapshot)
    except InvalidPolicy as exc:
        return ModelPlan(spec.name, Change.INVALID, message=f"model '{spec.name}': {exc}")
    default = max(versions)
    if spec.mirror is not None and spec.mirror.version not in versions:
        if spec.mirror.version not in snapshot:
            return ModelPlan(
                spec.name,
                Change.INVALID,
                message=f"model '{spec.name}': mirror version {spec.mirror.version} is not in the repository",
            )
        versions = sorted({*versions, spec.mirror.version})  # loaded beside the served ones, never default
    target = {v: snapshot[v] for v in versions}
    config = retry.fingerprint(spec.config_override)
    active = dict(record.content_hashes) if record is not None else {}
    active_config = record.config_hash if record is not None else None
    old_default = record.default_version if record is not None and active else None
    strategy = spec.rollout.strategy or RolloutStrategy.BOTH

    def planned(change: Change, keep: tuple[int, ...], old: int | None, new: int | None) -> ModelPlan:
        return ModelPlan(
            spec.name,
            change,
            target,
            active,
            keep,
            old,
            new,
            config=config,
            active_config=active_config,
            strategy=strategy,
        )

    if (
        record is not None
        and record.blocked_hashes == target
        and record.blocked_config == config
        and (active != target or active_config != config)
        and not retry.due(record, attempt or Attempt())
    ):
        return planned(Change.BLOCKED, tuple(sorted(active)), old_default, old_default)
    if active == target and active_config == config:
        return planned(Change.STEADY, tuple(versions), default, default)
    return planned(Change.ROLLOUT, tuple(sorted(set(active) | set(target))), old_default, default)


def plan(
    models: Sequence[ModelSpec],
    snapshot: Mapping[str, Mapping[int, str]] | None,
    records: Mapping[str, ModelStatus],
    pods: Sequence[PodObservation],
    attempt: Attempt | None = None,
    memory_limit: int | None = None,
    listing_complete: bool = True,
    copies: Mapping[str, int] | None = None,
) -> Plan:
    """Every stage for this pass, across all models: all loads first, then switches, then unloads, then
    the ``perPod`` replacements. ``snapshot`` (model -> version -> content hash) is None while the
    repository has none: then nothing is touched, not even models the spec no longer lists.
    ``attempt`` (the pass's clock, spec fingerprint and retry annotation) decides whether blocked models
    are tried again; ``memory_limit`` (the server container's, bytes) with the pods' measured footprints
    whether a rollout of a model with no strategy set goes ``perPod``. With ``listing_complete`` False
    the snapshot lists only some of the repository's models (a cut summary): a model it lacks waits as
    not known yet instead of being Invalid. ``copies``: model -> how many copies a model whose copies
    follow its load holds this pass (:mod:`.demand`); others hold their spec's."""
    attempt = attempt or Attempt()
    if snapshot is None:
        return Plan(
            {
                m.name: ModelPlan(
                    m.name, Change.WAITING, message="waiting for the repository's first snapshot"
                )
                for m in models
            },
            (),
            attempt=attempt,
        )
    ready = actionable(pods)
    admit = tuple(p.name for p in ready if p.preparing)
    plans: dict[str, ModelPlan] = {}
    loads: list[Action] = []
    switches: list[Action] = []
    unloads: list[Action] = []
    per_pod: list[Action] = []
    for spec in models:
        if spec.name not in snapshot and not listing_complete:
            plans[spec.name] = ModelPlan(
                spec.name,
                Change.WAITING,
                message=f"model '{spec.name}' is not known yet: the repository's listing is incomplete",
            )
            continue
        mp = replace(
            plan_model(spec, snapshot.get(spec.name), records.get(spec.name), attempt),
            placed=placement.chosen(spec, [p.name for p in ready], (copies or {}).get(spec.name)),
            on_demand=spec.on_demand,
        )
        chosen = [p for p in ready if mp.holds_here(p.name)]
        if mp.change is Change.ROLLOUT and spec.rollout.strategy is None:
            record = records.get(spec.name)
            previous = record.strategy if record is not None else None
            mp = _with_strategy(mp, choose_strategy(spec.name, mp, chosen, memory_limit, previous))
        plans[spec.name] = mp
        override = spec.config_override
        if mp.change is Change.INVALID or spec.on_demand:
            continue  # an onDemand model is loaded (and evicted) by the servers themselves
        # a pod no longer chosen (the fleet scaled, k changed) lets its copy go, but only once every
        # chosen pod holds one (make before break: a later pass unloads it)
        if all(p.ready_versions(spec.name) for p in chosen):
            unloads += [
                Unload(p.name, spec.name) for p in ready if not mp.holds_here(p.name) and p.holds(spec.name)
            ]
        if mp.strategy is RolloutStrategy.PER_POD:
            if all(p.gated for p in chosen):
                per_pod += _per_pod(spec.name, mp, chosen, override, loads)
                continue
            # pods from before the readiness gate cannot be taken out of the endpoints one by one
            mp = plans[spec.name] = _with_strategy(mp, RolloutStrategy.BOTH)
        if mp.change in (Change.STEADY, Change.BLOCKED):
            if not mp.keep:  # blocked before it ever loaded: nothing to hold
                continue
            for pod in chosen:
                if pod.preparing or pod.ready_versions(spec.name) != frozenset(mp.keep):
                    loads.append(Load(pod.name, spec.name, mp.keep, mp.new_default, False, override))
            continue
        done = _past_switch(spec.name, mp, chosen)
        first_default = mp.old_default if mp.active and not done else mp.new_default
        for pod in chosen:
            if pod.name in done and not pod.preparing:
                continue
            if (
                mp.fresh
                or mp.reconfigure
                or pod.preparing
                or pod.ready_versions(spec.name) != frozenset(mp.keep)
            ):
                default = mp.new_default if pod.name in done else first_default
                versions = mp.target_versions if pod.name in done else mp.keep
                loads.append(Load(pod.name, spec.name, versions, default, mp.fresh, override))
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
            (StageKind.PER_POD, per_pod),
        )
        if actions
    )
    return Plan(plans, stages, tuple(unwanted), attempt, admit)


def choose_strategy(
    model: str,
    mp: ModelPlan,
    pods: Sequence[PodObservation],
    memory_limit: int | None,
    previous: RolloutStrategy | None = None,
) -> RolloutStrategy:
    """``perPod`` when some pod's measured memory plus another copy of this model's loaded versions
    (the new content is taken to weigh what the old does) would pass the container's memory limit;
    ``both`` when the measurements say it fits.  When no pod's measurement of the model came in this
    pass (a scrape failed, or the pods holding it are restarting), the strategy last chosen stands
    (``previous``, from the status): a missed scrape in the middle of a ``perPod`` rollout must not
    load two copies of a big model into every pod; with nothing ever chosen, ``both``."""
    if not memory_limit:
        return RolloutStrategy.BOTH
    measured = False
    for pod in pods:
        held = sum(b for versions in pod.memory.values() for b in versions.values())
        model_bytes = sum(pod.memory.get(model, {}).values())
        measured = measured or bool(model_bytes)
        if model_bytes and held + model_bytes > memory_limit:
            return RolloutStrategy.PER_POD
    if not measured and previous is not None:
        return previous
    return RolloutStrategy.BOTH


def _with_strategy(mp: ModelPlan, strategy: RolloutStrategy) -> ModelPlan:
    return replace(mp, strategy=strategy)


def _per_pod(
    model: str,
    mp: ModelPlan,
    pods: Sequence[PodObservation],
    override: Mapping[str, Any] | None,
    loads: list[Action],
) -> list[Action]:
    """A ``perPod`` model: each pod goes straight from what it holds to what it should serve, dropping
    the old versions before loading the new. Pods out of the Service already (held by the gate) are
    done in the Load stage; serving pods are returned for the ``PerPod`` stage, one at a time."""
    if mp.change in (Change.STEADY, Change.BLOCKED):
        versions, default = mp.keep, mp.new_default
        if not versions:
            return []
    else:
        versions, default = mp.target_versions, mp.new_default
    stale = mp.change is Change.ROLLOUT and (mp.fresh or mp.reconfigure)
    result: list[Action] = []
    for pod in pods:
        held = pod.ready_versions(model)
        if not pod.preparing and not stale and held == frozenset(versions):
            continue
        action = Load(pod.name, model, versions, default, mp.fresh, override, replace=bool(held))
        if pod.preparing:
            loads.append(action)
        else:
            result.append(action)
    return result


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
    per_pod: bool = False,
) -> dict[str, Failure]:
    """Rolling-out models whose target versions are not all READY on every actionable pod, after the
    Load stage; each with the first failing pod and the server's reason: from its index, else from the
    error its load call answered (``errors``, by pod and model), since a failed load may leave nothing
    in the index.

    A pod in ``lost`` never answered its load (it died or restarted mid-call): that says nothing about
    the model, so unless its index names a failed target version it is not blamed (blaming it blocked
    the new content for good); the level-triggered passes bring it in line once it is Ready again.

    ``per_pod`` checks the ``perPod`` models (after one pod's replacement) instead of the others."""
    result: dict[str, Failure] = {}
    for name, mp in plan_.models.items():
        if mp.change is not Change.ROLLOUT or (mp.strategy is RolloutStrategy.PER_POD) != per_pod:
            continue
        for pod in actionable(pods):
            if not mp.holds_here(pod.name):
                continue
            missing = [v for v in mp.target_versions if v not in pod.ready_versions(name)]
            refused = (errors or {}).get((pod.name, name)) if mp.reconfigure else None
            if refused and not missing:  # the server kept the old config serving after the reload failed
                result[name] = Failure(
                    reason="ModelLoadFailed", message=refused, pod=pod.name, version=mp.new_default, time=now
                )
                break
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

    A model that was never active is unloaded again where it came up or failed, so the fleet stays
    uniform and every server ready. A model with active versions gets exactly those back, with the old
    default pinned, on every pod where the set differs; when an active version changed content in the
    snapshot, reloading it would read the new (failed) content, so it is left to the server, which keeps
    the old copy serving after a failed reload.
    """
    ready = actionable(pods)
    if not mp.active:
        # also where it failed: a failed load left in the index keeps a strict-readiness server unready
        return [Unload(p.name, mp.name) for p in ready if p.holds(mp.name) or p.failed_versions(mp.name)]
    if mp.fresh:
        return []
    versions = tuple(sorted(mp.active))
    # a new override that failed is not carried back: the pod's own config still holds the old one
    keep_config = None if mp.reconfigure else override
    replace = mp.strategy is RolloutStrategy.PER_POD
    return [
        Load(p.name, mp.name, versions, mp.old_default, False, keep_config, replace=replace)
        for p in ready
        if mp.holds_here(p.name) and p.ready_versions(mp.name) != frozenset(versions)
    ]


def without(stage: Stage, models: set[str]) -> Stage:
    """The stage minus the actions on ``models`` (those rolled back after a failed Load)."""
    return Stage(stage.kind, tuple(a for a in stage.actions if a.model not in models))


def load_override(versions: Sequence[int], override: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``config_override`` parameter of a load (merged by the server into the repository's
    ``config.pbtxt``): the spec's override with the version policy set to exactly ``versions``."""
    return {**dict(override or {}), "version_policy": {"specific": {"versions": [int(v) for v in versions]}}}
