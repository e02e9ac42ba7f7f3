"""Canary decisions and their evidence, with the clock passed in: a step is held for its pause, judged on
the window between two scrapes of the pods' own counters, then advanced, promoted or aborted (weights
off before the new version is unloaded). What the pods then serve is checked under traffic in
``test_canary_traffic.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from naiad_operator.api.inferenceservice import CanaryPhase, ModelSpec, ModelStatus, StepVerdict
from naiad_operator.api.observed import PodObservation, VersionCounters, VersionObservation, VersionState
from naiad_operator.k8s.modelserver import parse_counters, routing_parameters
from naiad_operator.reconcile import analysis, canary, rollout
from naiad_operator.reconcile.rollout import Load, Routing, StageKind

from tests.operator import samples
from tests.operator.cel import admit, defaulted, schema

T0 = datetime(2026, 1, 1, tzinfo=UTC)
READY = VersionState.READY
INF = float("inf")


def counters(success: float, failure: float = 0.0, fast: float | None = None) -> VersionCounters:
    """``fast`` of the successes under 10 ms, the rest under 100 ms."""
    fast = success if fast is None else fast
    return VersionCounters(
        success, failure, fast * 5 + (success - fast) * 50, ((10, fast), (100, success), (INF, success))
    )


def pod(name: str, versions: tuple[int, ...] = (1, 2)) -> PodObservation:
    return PodObservation(
        name, f"http://{name}", True, {"m": {v: VersionObservation(READY) for v in versions}}
    )


def canary_spec(**analysis_: object) -> ModelSpec:
    return ModelSpec.model_validate(
        {
            "name": "m",
            "rollout": {"strategy": "canary", "steps": [10, 50], "pauseSeconds": 30, "analysis": analysis_},
        }
    )


def record(**extra: object) -> ModelStatus:
    return ModelStatus(name="m", active_versions=[1], default_version=1, content_hashes={1: "h1"}, **extra)  # type: ignore[arg-type]


def plan_for(spec: ModelSpec, rec: ModelStatus, pods: list[PodObservation]) -> rollout.Plan:
    return rollout.plan([spec], {"m": {1: "h1", 2: "h2"}}, {"m": rec}, pods)


def test_window_is_the_difference_between_two_scrapes_over_every_pod() -> None:
    before = {"a": {("m", 2): counters(100, 1)}, "b": {("m", 2): counters(50)}}
    # a counted 100 more (2 failed); b restarted (its counters went down): all of its count is new; c is new
    after = {
        "a": {("m", 2): counters(200, 3)},
        "b": {("m", 2): counters(20)},
        "c": {("m", 2): counters(80, 0, fast=0)},
    }
    window = analysis.window(before, after, "m", 2)
    evidence = window.evidence()
    assert (evidence.requests, evidence.errors) == (202, 2)
    assert evidence.error_rate == round(2 / 202, 4)
    # 120 of 200 successes under 10 ms, the other 80 between 10 and 100: p99 interpolates in that bucket
    assert evidence.p99_latency_ms == round(10 + 90 * (0.99 * 200 - 120) / 80, 3)
    assert evidence.mean_latency_ms == round((120 * 5 + 80 * 50) / 200, 3)
    assert analysis.window(before, after, "m", 1).evidence().requests == 0


def test_metrics_text_is_read_per_version_and_routing_is_json() -> None:
    text = """# TYPE nv_inference_request_success counter
nv_inference_request_success{model="m",version="2"} 7
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="m",reason="BACKEND",version="2"} 2
nv_inference_request_failure{model="m",reason="REJECTED",version="2"} 1
# TYPE nv_inference_request_error_response counter
nv_inference_request_error_response{model="m",version="2"} 2
# TYPE nv_inference_request_histogram_ms histogram
nv_inference_request_histogram_ms_bucket{le="10",model="m",version="2"} 6
nv_inference_request_histogram_ms_bucket{le="+Inf",model="m",version="2"} 7
nv_inference_request_histogram_ms_count{model="m",version="2"} 7
nv_inference_request_histogram_ms_sum{model="m",version="2"} 40.5
"""
    found = parse_counters(text)[("m", 2)]
    # the two requests the model answered with an error count as errors, not successes (Triton's counters
    # call them successes: Naiad's nv_inference_request_error_response says which)
    assert (found.success, found.failure, found.latency_sum_ms) == (5, 5, 40.5)
    assert found.buckets == ((10.0, 6.0), (INF, 7.0))
    assert routing_parameters({1: 90, 2: 10}, (2, 5)) == {
        "version_weights": '{"1": 90, "2": 10}',
        "mirror": '{"version": 2, "percent": 5}',
    }
    assert routing_parameters({}, None) == {"version_weights": "", "mirror": ""}


def test_a_canary_waits_for_the_load_stage_then_walks_its_steps_and_promotes() -> None:
    spec, pods = canary_spec(maxErrorRate=0.05), [pod("p0"), pod("p1")]
    loading = [pod("p0", (1,)), pod("p1", (1,))]
    # pods hold only v1: the Load stage runs, the old default stays pinned, no Switch
    held = canary.decide(spec, plan_for(spec, record(), loading).models["m"], record(), loading, T0, None, {})
    assert held.hold and held.canary is None and held.routing == Routing((), None)
    plan = canary.apply(plan_for(spec, record(), loading), {"m": held}, loading, {}, {})
    assert [s.kind for s in plan.stages] == [StageKind.LOAD]
    assert {a.default_version for a in plan.stages[0].actions} == {1}

    started = canary.decide(spec, plan_for(spec, record(), pods).models["m"], record(), pods, T0, None, {})
    assert started.canary is not None and started.canary.steps[0].weight == 10
    assert started.routing == Routing(((1, 90), (2, 10)))
    assert started.wake_at == T0 + timedelta(seconds=30) and started.new_baseline
    plan = canary.apply(plan_for(spec, record(), pods), {"m": started}, pods, {}, {})
    assert [s.kind for s in plan.stages] == [StageKind.ROUTE]  # weights set; no Switch, no Unload
    assert plan.stages[0].actions[0] == Load("p0", "m", (1, 2), 1, False, None, Routing(((1, 90), (2, 10))))

    rec = record(canary=started.canary)
    step = started.canary.steps[0]
    base = canary.Baseline(0, step.started_at, {"p0": {("m", 2): counters(0)}})
    early = canary.decide(
        spec, plan_for(spec, rec, pods).models["m"], rec, pods, T0 + timedelta(seconds=29), base, {}
    )
    assert early.hold and not early.writes_canary and early.wake_at == T0 + timedelta(seconds=30)
    # pods that already have the weights get no load again
    plan = canary.apply(
        plan_for(spec, rec, pods),
        {"m": early},
        pods,
        {("p0", "m"): early.routing, ("p1", "m"): early.routing},
        {},
    )  # type: ignore[dict-item]
    assert plan.stages == ()

    now = T0 + timedelta(seconds=31)
    scrape = {"p0": {("m", 2): counters(40, 1), ("m", 1): counters(360)}}
    moved = canary.decide(spec, plan_for(spec, rec, pods).models["m"], rec, pods, now, base, scrape)
    assert moved.canary is not None and moved.canary.step == 1
    first = moved.canary.steps[0]
    assert first.verdict is StepVerdict.PASSED and first.evidence is not None
    assert (first.evidence.requests, first.evidence.errors, first.share) == (41, 1, round(41 / 401, 4))
    assert moved.routing == Routing(((1, 50), (2, 50))) and moved.event is not None

    rec = record(canary=moved.canary)
    base = canary.Baseline(1, moved.canary.steps[1].started_at, scrape)
    later = now + timedelta(seconds=31)
    done = canary.decide(spec, plan_for(spec, rec, pods).models["m"], rec, pods, later, base, scrape)
    assert done.canary is not None and done.canary.phase is CanaryPhase.PROMOTED and not done.hold
    plan = canary.apply(plan_for(spec, rec, pods), {"m": done}, pods, {}, {})
    assert [s.kind for s in plan.stages] == [StageKind.SWITCH, StageKind.UNLOAD]
    assert {a.routing for s in plan.stages for a in s.actions} == {Routing((), None)}


def test_a_failing_step_aborts_weights_first_then_the_new_version_goes() -> None:
    spec, pods = canary_spec(maxErrorRate=0.05, maxP99LatencyMs=500), [pod("p0")]
    started = canary.decide(spec, plan_for(spec, record(), pods).models["m"], record(), pods, T0, None, {})
    assert started.canary is not None
    rec = record(canary=started.canary)
    base = canary.Baseline(0, started.canary.steps[0].started_at, {})
    scrape = {"p0": {("m", 2): counters(90, 10)}}
    aborted = canary.decide(
        spec, plan_for(spec, rec, pods).models["m"], rec, pods, T0 + timedelta(seconds=30), base, scrape
    )
    assert aborted.canary is not None and aborted.canary.phase is CanaryPhase.ABORTED
    assert aborted.abort is not None and "error rate 10.00%" in aborted.abort.message
    assert aborted.canary.steps[0].verdict is StepVerdict.FAILED
    plan = canary.apply(
        plan_for(spec, rec, pods), {"m": aborted}, pods, {("p0", "m"): Routing(((1, 90), (2, 10)))}, {}
    )
    assert [
        (s.kind, [(a.versions, a.default_version, a.routing) for a in s.actions]) for s in plan.stages
    ] == [  # type: ignore[union-attr]
        (StageKind.ROUTE, [((1, 2), 1, Routing())]),
        (StageKind.UNLOAD, [((1,), 1, Routing())]),
    ]


def test_a_lost_baseline_restarts_the_step_window_instead_of_guessing() -> None:
    spec, pods = canary_spec(maxErrorRate=0.05), [pod("p0")]
    started = canary.decide(spec, plan_for(spec, record(), pods).models["m"], record(), pods, T0, None, {})
    rec = record(canary=started.canary)
    later = T0 + timedelta(seconds=300)
    again = canary.decide(spec, plan_for(spec, rec, pods).models["m"], rec, pods, later, None, {"p0": {}})
    assert again.canary is not None and again.new_baseline and again.hold
    assert again.canary.step == 0 and again.wake_at == later + timedelta(seconds=30)


def test_a_mirror_version_is_loaded_beside_the_served_one_never_as_default() -> None:
    spec = ModelSpec.model_validate(
        {
            "name": "m",
            "versionPolicy": {"specific": {"versions": [1]}},
            "mirror": {"version": 2, "percent": 20},
        }
    )
    pods = [pod("p0", (1,))]
    plan = rollout.plan([spec], {"m": {1: "h1", 2: "h2"}}, {"m": record()}, pods)
    mp = plan.models["m"]
    assert mp.target_versions == (1, 2) and mp.new_default == 1
    decision = canary.decide(spec, mp, record(), pods, T0, None, None)
    plan = canary.apply(plan, {"m": decision}, pods, {}, {})
    assert [(s.kind, a.versions, a.default_version, a.routing) for s in plan.stages for a in s.actions] == [  # type: ignore[union-attr]
        (StageKind.LOAD, (1, 2), 1, Routing((), (2, 20)))
    ]
    missing = ModelSpec.model_validate({"name": "m", "mirror": {"version": 7, "percent": 20}})
    assert "mirror version 7" in rollout.plan([missing], {"m": {1: "h1"}}, {}, pods).models["m"].message


def test_the_crd_admits_a_canary_and_a_mirror_and_refuses_impossible_shares() -> None:
    def isvc(model: dict[str, object]) -> dict[str, object]:
        return samples.inference_service(models=[{"name": "resnet", **model}])

    good = {
        "rollout": {
            "strategy": "canary",
            "steps": [10, 50, 100],
            "pauseSeconds": 30,
            "analysis": {"maxErrorRate": 0.01, "maxP99LatencyMs": 250},
        },
        "mirror": {"version": 2, "percent": 20},
    }
    assert admit("inferenceservices", isvc(good)) == []
    model = defaulted(schema("inferenceservices"), isvc({"rollout": {"strategy": "canary"}}))["spec"][
        "models"
    ][0]
    parsed = ModelSpec.model_validate(model)
    assert (parsed.rollout.pause_seconds, parsed.rollout.analysis.min_requests) == (60, 0)
    # no strategy: the CRD sets none, so the operator picks both or perPod from measured memory
    plain = defaulted(schema("inferenceservices"), isvc({}))["spec"]["models"][0]
    assert "strategy" not in plain["rollout"] and plain["rollout"]["pauseSeconds"] == 60
    assert ModelSpec.model_validate(plain).rollout.strategy is None
    for bad in (
        {"rollout": {"strategy": "canary", "steps": [150]}},
        {"rollout": {"strategy": "blue-green"}},
        {"rollout": {"analysis": {"maxErrorRate": 2}}},
        {"mirror": {"version": 2, "percent": 101}},
        {"mirror": {"percent": 10}},
    ):
        assert admit("inferenceservices", isvc(bad)), bad


def test_routing_reaches_per_pod_replacements_and_gated_pods_are_still_admitted() -> None:
    """A mirror on a ``perPod`` model: the routing rides on the one-pod-at-a-time replacement and on the
    load of a pod held out by its readiness gate, which the woven plan still lets in."""
    spec = ModelSpec.model_validate(
        {
            "name": "m",
            "versionPolicy": {"specific": {"versions": [2]}},
            "mirror": {"version": 3, "percent": 20},
            "rollout": {"strategy": "perPod"},
        }
    )
    held = {"m": {1: VersionObservation(READY)}}
    serving = PodObservation("p0", "http://p0", True, held, gated=True, containers_ready=True, gate_open=True)
    starting = PodObservation("p1", "http://p1", False, held, gated=True, containers_ready=True)
    pods = [serving, starting]
    plan = rollout.plan([spec], {"m": {1: "h1", 2: "h2", 3: "h3"}}, {"m": record()}, pods)
    decision = canary.decide(spec, plan.models["m"], record(), pods, T0, None, None)
    woven = canary.apply(plan, {"m": decision}, pods, {}, {})
    mirrored = Routing((), (3, 20))
    assert [(s.kind, [(a.pod, a.versions, a.routing) for a in s.actions]) for s in woven.stages] == [  # type: ignore[union-attr]
        (StageKind.LOAD, [("p1", (2, 3), mirrored)]),
        (StageKind.PER_POD, [("p0", (2, 3), mirrored)]),
    ]
    assert woven.admit == plan.admit == ("p1",) and woven.attempt == plan.attempt


def test_a_canary_of_a_model_on_some_pods_starts_once_its_chosen_pods_hold_both_versions() -> None:
    spec = ModelSpec.model_validate({**canary_spec().model_dump(by_alias=True), "placement": {"copies": 1}})
    names = ["p0", "p1", "p2"]
    chosen = rollout.plan([spec], {"m": {1: "h1", 2: "h2"}}, {"m": record()}, [pod(n, ()) for n in names])
    (holder,) = chosen.models["m"].placed or ()
    # only the chosen pod holds the model (old and new); the others hold nothing and forward its requests
    pods = [pod(n) if n == holder else PodObservation(n, f"http://{n}", True, {}) for n in names]
    plan = plan_for(spec, record(), pods)
    started = canary.decide(spec, plan.models["m"], record(), pods, T0, None, {})
    assert started.canary is not None and started.routing == Routing(((1, 90), (2, 10)))
    routed = canary.apply(plan, {"m": started}, pods, {}, {})
    assert [(a.pod, a.routing) for s in routed.stages for a in s.actions] == [(holder, started.routing)]
