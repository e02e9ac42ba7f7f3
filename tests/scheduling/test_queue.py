"""Priority levels, queue sizes and timeouts of the request queue, with a fake clock (ns)."""

from __future__ import annotations

import pytest
from naiad.core.errors import UnavailableError
from naiad.core.request import InferRequest
from naiad.scheduling.policy import PriorityLevels, QueuePolicy
from naiad.scheduling.queue import DELAYED, REMOVED, TAKEN, QueuedRequest, RequestQueue

US = 1000


def entry(name: str, level: int = 0, timeout_us: int = 0, at: int = 0) -> QueuedRequest:
    request = InferRequest("m", id=name, timeout_us=timeout_us)
    return QueuedRequest(request, None, at, level=level)  # type: ignore[arg-type]


def ids(queue: RequestQueue) -> list[str]:
    return [e.request.id for e in queue.entries()]


def test_levels_are_served_highest_priority_first_then_in_arrival_order() -> None:
    queue = RequestQueue(PriorityLevels.of(QueuePolicy(), QueuePolicy()))
    for name, level in (("low1", 1), ("high1", 0), ("low2", 1), ("high2", 0)):
        queue.push(entry(name, level), 0)
    assert ids(queue) == ["high1", "high2", "low1", "low2"]
    assert [e.request.id for e in queue.take(3)] == ["high1", "high2", "low1"]
    assert len(queue) == 1 and ids(queue) == ["low2"]


def test_full_level_rejects_with_tritons_message() -> None:
    queue = RequestQueue(PriorityLevels.of(QueuePolicy(max_queue_size=2), QueuePolicy()))
    queue.push(entry("a"), 0)
    queue.push(entry("b"), 0)
    with pytest.raises(UnavailableError, match=r"^Exceeds maximum queue size$"):
        queue.push(entry("c"), 0)
    queue.push(entry("other level", level=1), 0)  # the bound is per level
    assert len(queue) == 3


def test_removed_requests_leave_wherever_they_are() -> None:
    queue = RequestQueue(PriorityLevels.of(QueuePolicy()))
    entries = [entry(name) for name in "abc"]
    for e in entries:
        queue.push(e, 0)
    assert queue.remove(entries[1])
    assert entries[1].state == REMOVED and not queue.remove(entries[1])
    assert ids(queue) == ["a", "c"]
    taken = queue.take(5)
    assert [e.request.id for e in taken] == ["a", "c"] and all(e.state == TAKEN for e in taken)
    assert len(queue) == 0 and not queue.remove(taken[0])


def test_reject_policy_expires_requests_at_their_timeout() -> None:
    queue = RequestQueue(PriorityLevels.of(QueuePolicy(default_timeout_us=100)))
    early, late = entry("early", at=0), entry("late", at=50 * US)
    queue.push(early, 0)
    queue.push(late, 50 * US)
    assert queue.next_deadline() == 100 * US
    assert queue.expire(99 * US) == []
    assert queue.expire(100 * US) == [early]
    assert ids(queue) == ["late"] and queue.next_deadline() == 150 * US


def test_delay_policy_moves_timed_out_requests_behind_their_level() -> None:
    queue = RequestQueue(PriorityLevels.of(QueuePolicy(delay_on_timeout=True, default_timeout_us=100), QueuePolicy()))
    first, second = entry("first"), entry("second", at=80 * US)
    queue.push(first, 0)
    queue.push(second, 80 * US)
    queue.push(entry("next level", level=1), 0)
    assert queue.expire(100 * US) == []
    assert first.state == DELAYED
    assert ids(queue) == ["second", "first", "next level"]
    assert [e.request.id for e in queue.take(2)] == ["second", "first"]


def test_request_timeout_only_shortens_a_default_when_override_is_allowed() -> None:
    assert QueuePolicy(default_timeout_us=100, allow_timeout_override=True).timeout_us(40) == 40
    assert QueuePolicy(default_timeout_us=100, allow_timeout_override=True).timeout_us(400) == 100
    assert QueuePolicy(default_timeout_us=100).timeout_us(40) == 100
    assert QueuePolicy(allow_timeout_override=True).timeout_us(40) == 0  # no default: no timeout


def test_taken_requests_no_longer_time_out() -> None:
    queue = RequestQueue(PriorityLevels.of(QueuePolicy(default_timeout_us=100)))
    queue.push(entry("a"), 0)
    queue.take(1)
    assert queue.next_deadline() == 0 and queue.expire(1000 * US) == []


def test_levels_exist_while_they_hold_requests() -> None:
    """A queue of 2^64 - 1 levels serves the ones its requests use, in order, and keeps none empty."""
    levels = PriorityLevels(2**64 - 1, QueuePolicy(), ((2**40, QueuePolicy(max_queue_size=1)),))
    queue = RequestQueue(levels)
    entries = [entry(str(n), level) for n, level in enumerate((2**64 - 2, 2**40, 7, 2**40))]
    for queued in entries[:3]:
        queue.push(queued, 0)
    with pytest.raises(UnavailableError, match=r"^Exceeds maximum queue size$"):
        queue.push(entries[3], 0)  # that level's own policy
    assert list(queue.entries()) == [entries[2], entries[1], entries[0]]
    assert queue.take(2) == [entries[2], entries[1]]
    assert queue.remove(entries[0])
    assert len(queue) == 0 and not queue._levels and not queue._order
