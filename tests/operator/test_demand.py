"""A model's request rate from the pods' counters, and the copies a ``{copies, maxCopies}`` model holds
for it (``reconcile.demand``): pure functions of samples, status and the clock passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import jsonschema
import pytest
from naiad_operator.api.inferenceservice import InferenceServiceStatus, ModelSpec, ModelStatus
from naiad_operator.k8s.modelserver import parse_counters
from naiad_operator.reconcile import demand, placement
from naiad_operator.reconcile.syncjob import format_time

from tests.operator.cel import schema

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _spec(**placement_: Any) -> ModelSpec:
    return ModelSpec.model_validate({"name": "hot", "placement": placement_ or {"copies": 1}})


SCALING = {"copies": 1, "maxCopies": 3, "targetRequestsPerSecond": 10, "scaleDownDelaySeconds": 60}


def test_sample_adds_answered_and_failed_requests_of_every_version() -> None:
    text = "\n".join(
        [
            'nv_inference_request_success{model="hot",version="1"} 30',
            'nv_inference_request_failure{model="hot",version="1",reason="BACKEND"} 2',
            'nv_inference_request_success{model="hot",version="2"} 8',
            'nv_inference_request_success{model="cold",version="1"} 0',
        ]
    )
    taken = demand.sample({"pod-a": parse_counters(text)}, T0)
    assert taken.counts == {"pod-a": {"hot": 40.0, "cold": 0.0}}


def test_rate_is_the_growth_over_the_window_summed_over_pods() -> None:
    before = demand.RequestSample(_at(0), {"a": {"hot": 100.0}, "b": {"hot": 10.0, "cold": 5.0}})
    after = demand.RequestSample(_at(10), {"a": {"hot": 150.0}, "b": {"hot": 40.0, "cold": 5.0}})
    assert demand.rates(before, after) == {"hot": 8.0, "cold": 0.0}


def test_a_reset_counter_restarts_from_zero_and_new_pods_wait_for_their_second_sample() -> None:
    before = demand.RequestSample(_at(0), {"a": {"hot": 500.0}, "b": {}})
    after = demand.RequestSample(
        _at(5),
        {
            "a": {"hot": 20.0},  # restarted: 20 since, not -480
            "b": {"hot": 10.0},  # loaded here during the window: its counter started at 0
            "c": {"hot": 9000.0},  # not seen at the window's start: its count spans an unknown time
        },
    )
    assert demand.rates(before, after) == {"hot": 6.0}


def test_no_time_between_samples_gives_no_rate() -> None:
    same = demand.RequestSample(_at(0), {"a": {"hot": 1.0}})
    assert demand.rates(same, same) == {}


def test_a_window_closes_only_once_it_is_long_enough() -> None:
    first = demand.RequestSample(_at(0), {"a": {"hot": 0.0}})
    opened, found = demand.advance(None, first, window=2.0)
    assert opened is first and found is None  # one count alone is no rate
    burst = demand.RequestSample(_at(0.5), {"a": {"hot": 50.0}})
    opened, found = demand.advance(opened, burst, window=2.0)
    assert opened is first and found is None  # a pass right after another: the window stays open
    later = demand.RequestSample(_at(4), {"a": {"hot": 100.0}})
    opened, found = demand.advance(opened, later, window=2.0)
    assert opened is later and found == {"hot": 25.0}
    stepped_back = demand.RequestSample(_at(1), {"a": {"hot": 120.0}})
    opened, found = demand.advance(opened, stepped_back, window=2.0)
    assert opened is stepped_back and found is None


@pytest.mark.parametrize(
    ("rate", "copies"), [(0.0, 1), (9.9, 1), (10.0, 1), (10.5, 2), (20.0, 2), (29.0, 3), (1000.0, 3)]
)
def test_copies_asked_for_are_the_rate_over_the_target_within_the_bounds(rate: float, copies: int) -> None:
    assert demand.wanted(_spec(**SCALING), rate) == copies


def test_a_floor_of_two_holds_two_when_idle_and_fixed_copies_do_not_scale() -> None:
    assert demand.wanted(_spec(**{**SCALING, "copies": 2}), 0.0) == 2
    assert demand.wanted(_spec(copies=2), 500.0) is None
    assert demand.scale(_spec(copies=2), None, 500.0, T0) is None
    assert demand.scale(ModelSpec(name="m"), None, 500.0, T0) is None


def _held(copies: int, needed_at: datetime | None) -> ModelStatus:
    return ModelStatus(
        name="hot", target_copies=copies, copies_needed_at=format_time(needed_at) if needed_at else None
    )


def test_copies_grow_at_once_and_record_when_they_were_needed() -> None:
    spec = _spec(**SCALING)
    assert demand.scale(spec, None, 0.0, T0) == demand.Scale(1, None)
    assert demand.scale(spec, _held(1, None), 25.0, _at(30)) == demand.Scale(3, format_time(_at(30)))
    # still needed: the moment moves on
    assert demand.scale(spec, _held(3, T0), 30.0, _at(30)) == demand.Scale(3, format_time(_at(30)))


def test_copies_shrink_only_after_the_delay_since_they_were_last_needed() -> None:
    spec = _spec(**SCALING)
    record = _held(3, T0)
    assert demand.scale(spec, record, 0.0, _at(59)) == demand.Scale(3, format_time(T0))
    assert demand.scale(spec, record, 15.0, _at(60)) == demand.Scale(2, format_time(_at(60)))
    assert demand.scale(spec, record, 0.0, _at(60)) == demand.Scale(1, None)


def test_no_measurement_holds_the_count() -> None:
    spec = _spec(**SCALING)
    assert demand.scale(spec, _held(3, T0), None, _at(600)) == demand.Scale(3, format_time(T0))


def test_an_unknown_last_need_starts_the_delay_now() -> None:
    spec = _spec(**SCALING)
    assert demand.scale(spec, _held(3, None), 0.0, _at(5)) == demand.Scale(3, format_time(_at(5)))


def test_changed_bounds_clamp_the_count_held() -> None:
    assert demand.scale(_spec(**{**SCALING, "maxCopies": 2}), _held(3, T0), None, _at(1)).copies == 2
    raised = demand.scale(_spec(**{**SCALING, "copies": 2}), _held(1, None), 0.0, _at(1))
    assert raised == demand.Scale(2, None)


def test_every_scaling_model_is_scaled_and_an_uncounted_one_has_rate_zero() -> None:
    models = [_spec(**SCALING), ModelSpec(name="plain")]
    records = {"hot": _held(3, T0)}
    assert demand.scales(models, records, {}, _at(60)) == {"hot": demand.Scale(1, None)}
    assert demand.scales(models, records, None, _at(60)) == {"hot": demand.Scale(3, format_time(T0))}


def test_more_copies_extend_the_ranking() -> None:
    """Growing from k to k+1 keeps the k pods and adds the next in rank; shrinking drops the last."""
    spec = _spec(**SCALING)
    pods = [f"vision-{i}" for i in range(8)]
    ranks = [placement.chosen(spec, pods, k) for k in (1, 2, 3)]
    assert [len(r or ()) for r in ranks] == [1, 2, 3]
    assert ranks[0] and ranks[1] and ranks[2] and ranks[0] < ranks[1] < ranks[2]
    assert placement.chosen(spec, pods) == ranks[0]  # no count given: the spec's floor


def test_status_records_rate_and_copies_and_fits_the_crd() -> None:
    status = InferenceServiceStatus(models=[ModelStatus(name="hot"), ModelStatus(name="plain")])
    models = [_spec(**SCALING), ModelSpec(name="plain")]
    scaled = {"hot": demand.Scale(2, format_time(T0))}
    written = demand.record(status, models, {"hot": 12.34567}, scaled)
    hot, plain = written.models
    assert (hot.requests_per_second, hot.target_copies, hot.copies_needed_at) == (12.346, 2, format_time(T0))
    assert (plain.requests_per_second, plain.target_copies) == (0.0, None)
    jsonschema.validate(written.dump(), schema("inferenceservices")["properties"]["status"])
    # a pass that closed no window keeps the last rate
    kept = demand.record(written, models, None, scaled)
    assert kept.models[0].requests_per_second == 12.346
