"""Rollout plans for every case: steady, drift, new model, new version, changed content, removed model,
failed load and rollback, invalid spec, no snapshot yet, pinned snapshot."""

from __future__ import annotations

from naiad_operator.api.inferenceservice import ModelSpec, ModelStatus, RolloutStrategy, VersionPolicy
from naiad_operator.api.modelrepository import ModelRepositoryStatus
from naiad_operator.api.observed import PodObservation, VersionObservation, VersionState
from naiad_operator.reconcile import retry, rollout
from naiad_operator.reconcile.rollout import Change, Load, StageKind, Unload
from naiad_operator.reconcile.versions import InvalidPolicy, select_versions

READY, FAILED = VersionState.READY, VersionState.UNAVAILABLE
NOW = "2026-01-01T00:00:00Z"


def pod(
    name: str, ready: bool = True, **models: dict[int, VersionState | tuple[VersionState, str]]
) -> PodObservation:
    index = {
        m: {v: VersionObservation(*(s if isinstance(s, tuple) else (s,))) for v, s in versions.items()}
        for m, versions in models.items()
    }
    return PodObservation(name, f"http://{name}:8000", ready, index)


def record(name: str, hashes: dict[int, str], default: int | None = None, **extra: object) -> ModelStatus:
    return ModelStatus(
        name=name,
        active_versions=sorted(hashes),
        content_hashes=hashes,
        default_version=default if default is not None else max(hashes),
        **extra,
    )  # type: ignore[arg-type]


def spec(name: str, **kw: object) -> ModelSpec:
    return ModelSpec.model_validate({"name": name, **kw})


def actions(plan: rollout.Plan) -> dict[StageKind, list[rollout.Action]]:
    return {s.kind: list(s.actions) for s in plan.stages}


def test_steady_fleet_needs_nothing() -> None:
    pods = [pod("p0", m={1: READY}), pod("p1", m={1: READY})]
    plan = rollout.plan([spec("m")], {"m": {1: "h1"}}, {"m": record("m", {1: "h1"})}, pods)
    assert plan.stages == ()
    assert plan.models["m"].change is Change.STEADY


def test_drift_is_repaired_on_the_drifted_pod_only() -> None:
    """A restarted pod lost the model; another has an extra version loaded by hand."""
    pods = [pod("p0", m={1: READY}), pod("p1"), pod("p2", m={1: READY, 0: READY})]
    plan = rollout.plan([spec("m")], {"m": {0: "h0", 1: "h1"}}, {"m": record("m", {1: "h1"})}, pods)
    assert actions(plan) == {StageKind.LOAD: [Load("p1", "m", (1,), 1), Load("p2", "m", (1,), 1)]}


def test_pods_not_ready_or_not_answering_are_left_alone() -> None:
    starting = PodObservation("p1", "http://p1:8000", False, {})
    silent = PodObservation("p2", "http://p2:8000", True, {}, index_error="timeout")
    plan = rollout.plan(
        [spec("m")],
        {"m": {1: "h1"}},
        {"m": record("m", {1: "h1"})},
        [pod("p0", m={1: READY}), starting, silent],
    )
    assert plan.stages == ()


def test_first_pass_adopts_what_pods_loaded_at_start() -> None:
    """Pods started with --load-model already serve the target: nothing to do, nothing reloaded."""
    plan = rollout.plan([spec("m")], {"m": {1: "h1"}}, {}, [pod("p0", m={1: READY})])
    assert plan.stages == () and plan.models["m"].change is Change.ROLLOUT


def test_new_model_is_loaded_everywhere_with_its_default() -> None:
    pods = [pod("p0", m={1: READY}), pod("p1", m={1: READY})]
    plan = rollout.plan(
        [spec("m"), spec("n")], {"m": {1: "h1"}, "n": {2: "x2", 3: "x3"}}, {"m": record("m", {1: "h1"})}, pods
    )
    assert actions(plan) == {StageKind.LOAD: [Load("p0", "n", (3,), 3), Load("p1", "n", (3,), 3)]}


def test_new_version_is_make_before_break() -> None:
    """v2 appears: load {1,2} with 1 pinned, then pin 2, then keep only 2; in that order, on every pod."""
    pods = [pod("p0", m={1: READY}), pod("p1", m={1: READY})]
    plan = rollout.plan([spec("m")], {"m": {1: "h1", 2: "h2"}}, {"m": record("m", {1: "h1"})}, pods)
    assert [s.kind for s in plan.stages] == [StageKind.LOAD, StageKind.SWITCH, StageKind.UNLOAD]
    assert actions(plan) == {
        StageKind.LOAD: [Load("p0", "m", (1, 2), 1), Load("p1", "m", (1, 2), 1)],
        StageKind.SWITCH: [Load("p0", "m", (1, 2), 2), Load("p1", "m", (1, 2), 2)],
        StageKind.UNLOAD: [Load("p0", "m", (2,), 2), Load("p1", "m", (2,), 2)],
    }


def test_interrupted_rollout_resumes_without_reloading() -> None:
    """The operator died after the Load stage: pods already hold {1,2}; only switch and unload remain."""
    pods = [pod("p0", m={1: READY, 2: READY})]
    plan = rollout.plan([spec("m")], {"m": {1: "h1", 2: "h2"}}, {"m": record("m", {1: "h1"})}, pods)
    assert StageKind.LOAD not in actions(plan)
    assert actions(plan)[StageKind.SWITCH] == [Load("p0", "m", (1, 2), 2)]


def test_changed_content_of_the_same_version_is_reloaded_fresh() -> None:
    pods = [pod("p0", m={1: READY})]
    plan = rollout.plan([spec("m")], {"m": {1: "h1-new"}}, {"m": record("m", {1: "h1"})}, pods)
    assert actions(plan) == {StageKind.LOAD: [Load("p0", "m", (1,), 1, fresh=True)]}


def test_unchanged_models_are_not_touched_when_others_roll() -> None:
    pods = [pod("p0", a={1: READY}, b={1: READY})]
    plan = rollout.plan(
        [spec("a"), spec("b")],
        {"a": {1: "a1"}, "b": {1: "b1", 2: "b2"}},
        {"a": record("a", {1: "a1"}), "b": record("b", {1: "b1"})},
        pods,
    )
    assert {a.model for s in plan.stages for a in s.actions} == {"b"}


def test_removed_model_is_unloaded_after_loads() -> None:
    pods = [pod("p0", a={1: READY}, gone={1: READY}), pod("p1", a={1: READY})]
    plan = rollout.plan(
        [spec("a"), spec("n")],
        {"a": {1: "a1"}, "n": {1: "n1"}, "gone": {1: "g1"}},
        {"a": record("a", {1: "a1"})},
        pods,
    )
    assert [s.kind for s in plan.stages] == [StageKind.LOAD, StageKind.UNLOAD]
    assert actions(plan)[StageKind.UNLOAD] == [Unload("p0", "gone")]
    assert plan.unwanted == ("gone",)


def test_an_unloaded_model_is_not_unloaded_again() -> None:
    """After an unload the index still lists the model's versions, UNAVAILABLE: nothing to do."""
    pods = [pod("p0", a={1: READY}, gone={1: (FAILED, "unloaded")})]
    plan = rollout.plan([spec("a")], {"a": {1: "a1"}}, {"a": record("a", {1: "a1"})}, pods)
    assert plan.stages == () and plan.unwanted == ()


def test_version_policies() -> None:
    assert select_versions(VersionPolicy(), [3, 1, 2]) == [3]
    assert select_versions(VersionPolicy.model_validate({"latest": {"numVersions": 2}}), [3, 1, 2]) == [2, 3]
    assert select_versions(VersionPolicy.model_validate({"all": {}}), [3, 1]) == [1, 3]
    assert select_versions(VersionPolicy.model_validate({"specific": {"versions": [1]}}), [1, 2]) == [1]
    for policy, available in (({"specific": {"versions": [4]}}, [1]), ({}, [])):
        try:
            select_versions(VersionPolicy.model_validate(policy), available)
        except InvalidPolicy:
            continue
        raise AssertionError(policy)


def test_invalid_spec_touches_nothing() -> None:
    pods = [pod("p0", m={1: READY})]
    plan = rollout.plan(
        [spec("m", versionPolicy={"specific": {"versions": [9]}}), spec("absent")],
        {"m": {1: "h1"}},
        {"m": record("m", {1: "h1"})},
        pods,
    )
    assert plan.stages == ()
    assert plan.models["m"].change is Change.INVALID and "9" in plan.models["m"].message
    assert plan.models["absent"].message == "model 'absent' is not in the repository"


def test_no_snapshot_yet_means_waiting() -> None:
    plan = rollout.plan([spec("m")], None, {}, [pod("p0", other={1: READY})])
    assert plan.stages == () and plan.models["m"].change is Change.WAITING


def test_failed_load_is_detected_with_the_servers_reason() -> None:
    pods = [pod("p0", m={1: READY, 2: READY}), pod("p1", m={1: READY, 2: (FAILED, "boom in initialize")})]
    plan = rollout.plan(
        [spec("m")],
        {"m": {1: "h1", 2: "h2"}},
        {"m": record("m", {1: "h1"})},
        [pod("p0", m={1: READY}), pod("p1", m={1: READY})],
    )
    failures = rollout.failures(plan, pods, NOW)
    assert failures["m"].pod == "p1" and failures["m"].version == 2
    assert failures["m"].message == "boom in initialize"


def test_rollback_restores_active_versions_and_old_default() -> None:
    before = [pod("p0", m={1: READY}), pod("p1", m={1: READY})]
    plan = rollout.plan([spec("m")], {"m": {1: "h1", 2: "h2"}}, {"m": record("m", {1: "h1"})}, before)
    after = [pod("p0", m={1: READY, 2: READY}), pod("p1", m={1: READY, 2: (FAILED, "x")})]
    # p1 already serves exactly v1 (its failed v2 never replaced it): only p0 needs v2 dropped
    assert rollout.rollback(plan.models["m"], after, None) == [Load("p0", "m", (1,), 1)]
    remaining = rollout.without(plan.stage(StageKind.SWITCH), {"m"})  # type: ignore[arg-type]
    assert remaining.actions == ()


def test_rollback_of_a_new_model_unloads_it_where_it_came_up_or_failed() -> None:
    plan = rollout.plan([spec("n")], {"n": {1: "n1"}}, {}, [pod("p0"), pod("p1"), pod("p2")])
    after = [pod("p0", n={1: READY}), pod("p1", n={1: (FAILED, "bad")}), pod("p2")]
    # p1's failed version would keep its strict-readiness server unready (status has the reason already)
    assert rollout.rollback(plan.models["n"], after, None) == [Unload("p0", "n"), Unload("p1", "n")]


def test_blocked_target_is_not_retried_but_drift_is_held_at_active() -> None:
    blocked = record("m", {1: "h1"}, blocked_hashes={1: "h1", 2: "h2"})
    pods = [pod("p0", m={1: READY}), pod("p1", m={1: READY, 2: READY})]
    plan = rollout.plan(
        [spec("m", versionPolicy={"latest": {"numVersions": 2}})],
        {"m": {1: "h1", 2: "h2"}},
        {"m": blocked},
        pods,
    )
    assert plan.models["m"].change is Change.BLOCKED
    assert actions(plan) == {StageKind.LOAD: [Load("p1", "m", (1,), 1)]}


def test_new_content_after_a_block_is_tried_again() -> None:
    blocked = record("m", {1: "h1"}, blocked_hashes={2: "h2"})
    plan = rollout.plan(
        [spec("m")], {"m": {1: "h1", 2: "h2-fixed"}}, {"m": blocked}, [pod("p0", m={1: READY})]
    )
    assert plan.models["m"].change is Change.ROLLOUT


def test_config_override_travels_with_every_load() -> None:
    override = {"max_batch_size": 4}
    plan = rollout.plan([spec("m", configOverride=override)], {"m": {1: "h1"}}, {}, [pod("p0")])
    assert actions(plan)[StageKind.LOAD] == [Load("p0", "m", (1,), 1, False, override)]


def test_load_override_sets_the_version_policy_next_to_the_override() -> None:
    override = {"max_batch_size": 8, "version_policy": {"latest": {"num_versions": 1}}}
    assert rollout.load_override([1, 2], override) == {
        "max_batch_size": 8,
        "version_policy": {"specific": {"versions": [1, 2]}},
    }
    assert override["version_policy"] == {"latest": {"num_versions": 1}}  # the spec is not modified
    assert rollout.load_override([1], None) == {"version_policy": {"specific": {"versions": [1]}}}


def test_target_snapshot() -> None:
    repo = ModelRepositoryStatus.model_validate(
        {
            "snapshot": {"current": "sha256:new"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "models": [{"name": "m", "versions": [{"version": 2, "contentHash": "h2"}]}],
        }
    )
    assert rollout.target_snapshot(None, repo, {}, []) == {"m": {2: "h2"}}
    assert rollout.target_snapshot("sha256:new", repo, {}, []) == {"m": {2: "h2"}}
    assert rollout.target_snapshot("sha256:old", repo, {"m": record("m", {1: "h1"})}, []) == {"m": {1: "h1"}}
    assert rollout.target_snapshot(None, ModelRepositoryStatus(), {}, []) is None
    assert rollout.target_snapshot(None, None, {}, []) is None


def test_pinned_snapshot_map() -> None:
    records = {"m": record("m", {1: "h1"})}
    pods = [pod("p0", m={1: READY}, n={4: READY})]
    assert rollout.pinned_snapshot("sha256:old", records, pods) == {"m": {1: "h1"}, "n": {4: "sha256:old"}}


def test_a_pod_that_died_during_its_load_does_not_block_the_rollout() -> None:
    """Its load call got no answer and the restarted container does not list v2 yet: not a failed load."""
    plan = rollout.plan(
        [spec("m")], {"m": {1: "h1", 2: "h2"}}, {"m": record("m", {1: "h1"})}, [pod("p0", m={1: READY})]
    )
    after = [pod("p0", m={1: READY, 2: READY}), pod("p1", m={1: READY})]
    assert rollout.failures(plan, after, NOW, {}, {"p1"}) == {}
    broken = [pod("p0", m={1: READY, 2: READY}), pod("p1", m={1: READY, 2: (FAILED, "boom")})]
    assert rollout.failures(plan, broken, NOW, {}, {"p1"})["m"].message == "boom"


def test_a_rollout_resumed_after_its_unload_began_never_pins_the_old_version_again() -> None:
    """The operator died while p0 was unloading v1 (so v2 was pinned everywhere) and before it
    recorded v2 as active: p0 is left alone and p1 gets v2 pinned, never v1 again."""
    pods = [pod("p0", m={2: READY}), pod("p1", m={1: READY, 2: READY})]
    plan = rollout.plan([spec("m")], {"m": {1: "h1", 2: "h2"}}, {"m": record("m", {1: "h1"})}, pods)
    assert actions(plan) == {
        StageKind.SWITCH: [Load("p1", "m", (1, 2), 2)],
        StageKind.UNLOAD: [Load("p0", "m", (2,), 2), Load("p1", "m", (2,), 2)],
    }
    lagging = [pod("p0", m={2: READY}), pod("p1", m={1: READY})]
    plan = rollout.plan([spec("m")], {"m": {1: "h1", 2: "h2"}}, {"m": record("m", {1: "h1"})}, lagging)
    assert actions(plan)[StageKind.LOAD] == [Load("p1", "m", (1, 2), 2)]


def held(name: str, **models: dict[int, VersionState]) -> PodObservation:
    """A pod whose server is up but which its readiness gate still holds out of the Service."""
    index = {m: {v: VersionObservation(s) for v, s in versions.items()} for m, versions in models.items()}
    return PodObservation(name, f"http://{name}:8000", False, index, containers_ready=True, gated=True)


def test_a_pod_held_out_by_its_gate_is_loaded_with_override_and_pin_even_when_its_versions_match() -> None:
    """It loaded plain config.pbtxt at start: versions alone cannot tell, so it is loaded, then let in."""
    override = {"parameters": {"p": {"string_value": "x"}}}
    records = {"m": record("m", {1: "h1"}, config_hash=retry.fingerprint(override))}
    pods = [pod("p0", m={1: READY}), held("p1", m={1: READY})]
    plan = rollout.plan([spec("m", configOverride=override)], {"m": {1: "h1"}}, records, pods)
    assert plan.models["m"].change is Change.STEADY
    assert actions(plan) == {StageKind.LOAD: [Load("p1", "m", (1,), 1, False, override)]}
    assert plan.admit == ("p1",)


def test_a_changed_override_alone_reloads_every_pod() -> None:
    records = {"m": record("m", {1: "h1"})}  # rolled out without an override
    pods = [pod("p0", m={1: READY}), pod("p1", m={1: READY})]
    override = {"max_batch_size": 4}
    plan = rollout.plan([spec("m", configOverride=override)], {"m": {1: "h1"}}, records, pods)
    assert plan.models["m"].change is Change.ROLLOUT and plan.models["m"].reconfigure
    assert actions(plan) == {
        StageKind.LOAD: [Load("p0", "m", (1,), 1, False, override), Load("p1", "m", (1,), 1, False, override)]
    }


def test_per_pod_replaces_on_serving_pods_one_by_one_and_is_picked_by_measured_memory() -> None:
    gated = [
        PodObservation(n, f"http://{n}:8000", True, {"m": {1: VersionObservation(READY)}}, gated=True,
                       containers_ready=True, gate_open=True, gate_set=True, memory={"m": {1: 30 << 20}})
        for n in ("p0", "p1")
    ]  # fmt: skip
    snapshot, records = {"m": {1: "h1", 2: "h2"}}, {"m": record("m", {1: "h1"})}
    chosen = rollout.plan([spec("m", rollout={"strategy": "perPod"})], snapshot, records, gated)
    measured = rollout.plan([spec("m")], snapshot, records, gated, memory_limit=48 << 20)
    for plan in (chosen, measured):
        assert plan.models["m"].strategy is RolloutStrategy.PER_POD
        assert actions(plan) == {
            StageKind.PER_POD: [Load(p, "m", (2,), 2, replace=True) for p in ("p0", "p1")]
        }
    roomy = rollout.plan([spec("m")], snapshot, records, gated, memory_limit=64 << 20)
    assert roomy.models["m"].strategy is RolloutStrategy.BOTH


def test_a_pass_without_measurements_keeps_the_strategy_last_chosen() -> None:
    """A scrape that failed mid-rollout must not switch a big model to two copies per pod."""
    unmeasured = [
        PodObservation(n, f"http://{n}:8000", True, {"m": {1: VersionObservation(READY)}}, gated=True,
                       containers_ready=True, gate_open=True, gate_set=True)
        for n in ("p0", "p1")
    ]  # fmt: skip
    snapshot = {"m": {1: "h1", 2: "h2"}}
    strategies = {}
    for previous in (RolloutStrategy.PER_POD, RolloutStrategy.BOTH, None):
        records = {"m": record("m", {1: "h1"}, strategy=previous)}
        plan = rollout.plan([spec("m")], snapshot, records, unmeasured, memory_limit=48 << 20)
        strategies[previous] = plan.models["m"].strategy
    assert strategies == {
        RolloutStrategy.PER_POD: RolloutStrategy.PER_POD,
        RolloutStrategy.BOTH: RolloutStrategy.BOTH,
        None: RolloutStrategy.BOTH,
    }
