"""Leader election decided as data (``reconcile.leadership``): who may hold the Lease and what it says.

The end-to-end half (two operator processes, the leader SIGKILLed) is scenario 7 of ``test_chaos.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from naiad_operator.reconcile import leadership

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def test_a_free_or_own_lease_may_be_held() -> None:
    assert leadership.may_hold(leadership.parse(None), "a", NOW)
    own = leadership.parse({"holderIdentity": "a", "renewTime": "2026-01-01T12:00:00.000000Z"})
    assert leadership.may_hold(own, "a", NOW)
    released = leadership.parse({"holderIdentity": "", "leaseDurationSeconds": 1})
    assert leadership.may_hold(released, "b", NOW)


def test_another_holders_lease_is_taken_only_once_it_ran_out() -> None:
    spec = {"holderIdentity": "a", "renewTime": "2026-01-01T12:00:00.000000Z", "leaseDurationSeconds": 15}
    record = leadership.parse(spec)
    assert not leadership.may_hold(record, "b", NOW + timedelta(seconds=15))
    assert leadership.may_hold(record, "b", NOW + timedelta(seconds=15.1))


def test_held_spec_counts_transitions_and_keeps_the_acquire_time_on_renewal() -> None:
    first = leadership.held_spec(leadership.parse(None), "a", NOW, 15)
    assert first == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": "2026-01-01T12:00:00.000000Z",
        "renewTime": "2026-01-01T12:00:00.000000Z",
        "leaseTransitions": 0,
    }
    renewed = leadership.held_spec(leadership.parse(first), "a", NOW + timedelta(seconds=2), 15)
    assert renewed["acquireTime"] == first["acquireTime"] and renewed["leaseTransitions"] == 0
    assert renewed["renewTime"] == "2026-01-01T12:00:02.000000Z"
    taken = leadership.held_spec(leadership.parse(renewed), "b", NOW + timedelta(seconds=20), 15)
    assert taken["holderIdentity"] == "b" and taken["leaseTransitions"] == 1
    assert taken["acquireTime"] == "2026-01-01T12:00:20.000000Z"
