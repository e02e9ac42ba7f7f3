"""Triton's batch-forming rule, on hand-built queues with a fake clock (times in ns)."""

from __future__ import annotations

from naiad.scheduling.batcher import next_batch
from naiad.scheduling.policy import SchedulingPolicy
from naiad.scheduling.queue import QueuedRequest

MS = 1_000_000


def queued(*sizes: int, at: int = 0, keys: list[object] | None = None) -> list[QueuedRequest]:
    return [
        QueuedRequest(None, None, at, size, None if keys is None else keys[i])  # type: ignore[arg-type]
        for i, size in enumerate(sizes)
    ]


def policy(max_batch: int = 8, preferred: tuple[int, ...] = (), delay_ms: int = 0) -> SchedulingPolicy:
    return SchedulingPolicy(
        "m",
        batching=True,
        max_batch_size=max_batch,
        preferred_batch_sizes=frozenset(preferred),
        max_queue_delay_ns=delay_ms * MS,
    )


def test_empty_queue_runs_nothing() -> None:
    assert next_batch([], policy(), 0) == (0, 0)


def test_without_delay_everything_that_fits_goes_at_once() -> None:
    assert next_batch(queued(1, 1, 1), policy(), 0) == (3, 0)


def test_never_exceeds_max_batch_size_counting_each_batch_dimension() -> None:
    assert next_batch(queued(3, 4, 2, 1), policy(max_batch=8), 0) == (2, 0)
    assert next_batch(queued(8, 1), policy(max_batch=8), 0) == (1, 0)


def test_largest_preferred_size_is_chosen() -> None:
    # 1+1+1+1 = 4 is preferred; 6 is not, so the batch stops at 4 requests
    assert next_batch(queued(1, 1, 1, 1, 1, 1), policy(preferred=(2, 4)), 0) == (4, 0)
    assert next_batch(queued(1, 1, 1), policy(preferred=(2, 4)), 0) == (2, 0)


def test_waits_up_to_the_delay_for_a_fuller_batch() -> None:
    rule = policy(delay_ms=10)
    assert next_batch(queued(1, 1, at=0), rule, 4 * MS) == (0, 10 * MS)
    assert next_batch(queued(1, 1, at=0), rule, 10 * MS) == (2, 0)


def test_a_full_batch_does_not_wait() -> None:
    assert next_batch(queued(4, 4), policy(delay_ms=10), 0) == (2, 0)
    assert next_batch(queued(4, 4, 1), policy(delay_ms=10), 0) == (2, 0)


def test_a_preferred_size_does_not_wait_for_the_delay() -> None:
    assert next_batch(queued(2, 2), policy(preferred=(4,), delay_ms=10), 0) == (2, 0)


def test_after_the_delay_the_whole_prefix_goes_even_past_preferred() -> None:
    rule = policy(preferred=(2,), delay_ms=10)
    assert next_batch(queued(1, 1, 1), rule, 0) == (2, 0)
    assert next_batch(queued(1, 1, 1), rule, 10 * MS) == (3, 0)


def test_requests_of_different_shapes_are_not_merged() -> None:
    entries = queued(1, 1, 1, keys=["a", "a", "b"])
    assert next_batch(entries, policy(delay_ms=10), 0) == (2, 0)


def test_hurry_ignores_the_delay() -> None:
    assert next_batch(queued(1), policy(delay_ms=10), 0, hurry=True) == (1, 0)


def test_without_batching_one_request_per_execution() -> None:
    assert next_batch(queued(1, 1), SchedulingPolicy("m"), 0) == (1, 0)
