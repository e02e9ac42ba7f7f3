"""The request queue: priority levels, per-level queue policies and timeouts, as Triton orders them.

Requests are served highest priority level first; within a level, in arrival order, and requests
that outlived their timeout under a DELAY policy after all the others of their level.  Requests leave
from the front (taken into a batch) or from anywhere (cancelled, timed out), so removal is lazy: an
entry's ``state`` says where it is and stale deque slots are dropped when they reach the front.  The
queue never reads a clock; callers pass ``now_ns``, which keeps it testable with a fake clock.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
from collections import deque
from collections.abc import Hashable, Iterator

from naiad.core.errors import UnavailableError
from naiad.core.request import InferRequest, InferResponse
from naiad.scheduling.policy import PriorityLevels, QueuePolicy

# Where a QueuedRequest is.
QUEUED = 0  # in its level's main deque
DELAYED = 1  # timed out under a DELAY policy: in its level's delayed deque
TAKEN = 2  # handed to an instance
REMOVED = 3  # cancelled or rejected while queued


class QueuedRequest:
    """A request between ``submit`` and its response, with what the scheduler needs to place it.

    ``size`` counts batch elements (the request's batch dimension, 1 for models that do not batch);
    ``shape_key`` is equal for requests that may share a batch.
    """

    __slots__ = ("deadline_ns", "enqueue_ns", "future", "level", "request", "shape_key", "size", "state")

    def __init__(
        self,
        request: InferRequest,
        future: asyncio.Future[InferResponse],
        enqueue_ns: int,
        size: int = 1,
        shape_key: Hashable = None,
        level: int = 0,
    ) -> None:
        self.request = request
        self.future = future
        self.enqueue_ns = enqueue_ns
        self.size = size
        self.shape_key = shape_key
        self.level = level
        self.deadline_ns = 0
        self.state = QUEUED


class _Level:
    __slots__ = ("delayed", "live", "main", "policy")

    def __init__(self, policy: QueuePolicy) -> None:
        self.policy = policy
        self.main: deque[QueuedRequest] = deque()
        self.delayed: deque[QueuedRequest] = deque()
        self.live = 0


class RequestQueue:
    """Queued requests of one model version, across its priority levels (index 0 served first).

    A level exists while it holds requests: made when its first request comes, dropped when its
    last leaves, so a model may have any number of levels and clients may use any of them."""

    def __init__(self, levels: PriorityLevels) -> None:
        self._policies = levels
        self._levels: dict[int, _Level] = {}
        #: The indexes of ``_levels``, in order.
        self._order: list[int] = []
        self._deadlines: list[tuple[int, int, QueuedRequest]] = []
        self._serial = itertools.count()
        self._live = 0

    def _level(self, index: int) -> _Level:
        level = self._levels.get(index)
        if level is None:
            level = self._levels[index] = _Level(self._policies.policy(index))
            bisect.insort(self._order, index)
        return level

    def _left(self, index: int, level: _Level) -> None:
        """``level`` holds no request now: its deque slots are all stale, and it goes."""
        if not level.live:
            del self._levels[index]
            self._order.remove(index)

    def __len__(self) -> int:
        return self._live

    def push(self, entry: QueuedRequest, now_ns: int) -> None:
        """Queue ``entry`` at the back of its level; UNAVAILABLE when that level is full."""
        level = self._level(entry.level)
        policy = level.policy
        if policy.max_queue_size and level.live >= policy.max_queue_size:
            raise UnavailableError("Exceeds maximum queue size")  # (the level holds requests: it stays)
        timeout_us = policy.timeout_us(entry.request.timeout_us)
        if timeout_us:
            entry.deadline_ns = now_ns + timeout_us * 1000
            heapq.heappush(self._deadlines, (entry.deadline_ns, next(self._serial), entry))
            if len(self._deadlines) > 2 * self._live + 64:  # mostly stale: taken long ago
                self._deadlines = [d for d in self._deadlines if d[2].state == QUEUED]
                heapq.heapify(self._deadlines)
        entry.state = QUEUED
        level.main.append(entry)
        level.live += 1
        self._live += 1

    def remove(self, entry: QueuedRequest) -> bool:
        """Take ``entry`` out wherever it is; False when it is no longer queued."""
        if entry.state > DELAYED:
            return False
        entry.state = REMOVED
        level = self._levels[entry.level]
        level.live -= 1
        self._left(entry.level, level)
        self._live -= 1
        return True

    def entries(self) -> Iterator[QueuedRequest]:
        """Queued requests in the order they are to be served (nothing is removed)."""
        for index in self._order:
            level = self._levels[index]
            for entry in level.main:
                if entry.state == QUEUED:
                    yield entry
            for entry in level.delayed:
                if entry.state == DELAYED:
                    yield entry

    def take(self, count: int) -> list[QueuedRequest]:
        """Remove and return the first ``count`` requests of :meth:`entries`."""
        taken: list[QueuedRequest] = []
        for index in list(self._order):
            level = self._levels[index]
            for slots, state in ((level.main, QUEUED), (level.delayed, DELAYED)):
                while slots and len(taken) < count:
                    entry = slots.popleft()
                    if entry.state == state:
                        entry.state = TAKEN
                        taken.append(entry)
                        level.live -= 1
            self._left(index, level)
            if len(taken) == count:
                break
        self._live -= len(taken)
        return taken

    def next_deadline(self) -> int:
        """When the earliest queued request times out (0: none will)."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][2].state != QUEUED:
            heapq.heappop(deadlines)
        return deadlines[0][0] if deadlines else 0

    def expire(self, now_ns: int) -> list[QueuedRequest]:
        """Apply the queue policies to requests whose timeout has passed by ``now_ns``.

        Under REJECT they leave the queue and are returned, for the caller to answer; under DELAY
        they move behind their level's other requests and stay.
        """
        rejected: list[QueuedRequest] = []
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now_ns:
            entry = heapq.heappop(deadlines)[2]
            if entry.state != QUEUED:
                continue
            level = self._levels[entry.level]
            if level.policy.delay_on_timeout:
                entry.state = DELAYED
                level.delayed.append(entry)
            else:
                self.remove(entry)
                rejected.append(entry)
        return rejected
