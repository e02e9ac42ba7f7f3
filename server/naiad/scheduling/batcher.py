"""Choosing the next batch from the queue: Triton's dynamic batcher decision, as a pure function.

When an instance is free, the scheduler asks :func:`next_batch` how many of the queued requests (a
prefix, in service order) to run now, or until when to wait for more.  The rule is Triton's:

* a batch is a prefix of requests whose batch sizes add up to at most ``max_batch_size`` and whose
  non-batch shapes agree (unless ragged); it stops at the first request that does not fit;
* the largest preferred batch size that the prefix can make is sent at once, unless the oldest
  request has waited ``max_queue_delay`` already, in which case the whole prefix goes;
* without a preferred size, the prefix is sent when it cannot grow (full, blocked by a request of
  another shape, or as large as the largest preferred size), or when the delay is 0 or has passed;
* otherwise the batcher waits until the oldest request has waited ``max_queue_delay``.
"""

from __future__ import annotations

from collections.abc import Iterable

from naiad.scheduling.policy import SchedulingPolicy
from naiad.scheduling.queue import QueuedRequest

_NO_KEY = object()


def next_batch(
    queued: Iterable[QueuedRequest], policy: SchedulingPolicy, now_ns: int, hurry: bool = False
) -> tuple[int, int]:
    """``(count, 0)``: run the first ``count`` requests now; ``(0, when_ns)``: look again then.

    ``(0, 0)`` means the queue is empty.  ``hurry`` treats the delay as passed (the scheduler is
    closing and must not wait for requests that will never come).
    """
    if not policy.batching:
        for _ in queued:
            return 1, 0
        return 0, 0
    max_batch = policy.max_batch_size
    max_preferred = policy.max_preferred_batch_size
    preferred = policy.preferred_batch_sizes
    pending = count = best = 0
    oldest = now_ns
    key: object = _NO_KEY
    blocked = False
    for entry in queued:
        size = entry.size
        if count:
            grown = pending + size
            if grown > max_preferred and not best:
                best = count
            if grown > max_batch or entry.shape_key != key:
                blocked = True
                break
        else:
            key = entry.shape_key
        pending += size
        count += 1
        if entry.enqueue_ns < oldest:
            oldest = entry.enqueue_ns
        if pending in preferred:
            best = count
    if not count:
        return 0, 0
    delay = policy.max_queue_delay_ns
    waited_enough = hurry or (delay > 0 and now_ns - oldest >= delay)
    if best and not waited_enough:
        return best, 0
    if blocked or pending >= max_preferred or delay == 0 or waited_enough:
        return count, 0
    return 0, oldest + delay
