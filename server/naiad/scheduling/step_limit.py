"""An ensemble step's cap on requests in flight (``ensemble_scheduling { max_inflight_requests }``).

The cap is shared by every request of the ensemble version, as current Triton counts it: a decoupled
producer faster than the steps after it, or many clients at once, cannot flood the composing models'
queues; the ensemble's requests wait for a slot in the order they asked.  A request waits for a slot
at most :data:`WAIT_S` seconds and then proceeds over the cap, with an error in the log (Triton's
guard against a deadlock through models shared with other ensembles).  A cancelled request stops
waiting at once, and a slot handed to it while it was being cancelled passes on to the next one.
"""

from __future__ import annotations

import asyncio
import collections
import logging

log = logging.getLogger(__name__)

#: How long a step's request waits for a slot before it proceeds over the cap (Triton: 300 s).
WAIT_S = 300.0


class StepLimit:
    """The slots of one step of one ensemble version: ``cap`` requests at a time, on the event loop."""

    __slots__ = ("_waiting", "cap", "count", "ensemble", "step")

    def __init__(self, cap: int, ensemble: str, step: int) -> None:
        self.cap = cap
        self.ensemble = ensemble
        self.step = step
        #: Requests holding a slot (above ``cap`` only after a wait ran out).
        self.count = 0
        #: Each waiting request's future: True when a slot was handed to it, False when its wait ran out.
        self._waiting: collections.deque[asyncio.Future[bool]] = collections.deque()

    async def acquire(self) -> None:
        if self.count < self.cap and not self._waiting:
            self.count += 1
            return
        loop = asyncio.get_running_loop()
        slot: asyncio.Future[bool] = loop.create_future()
        self._waiting.append(slot)
        timer = loop.call_later(WAIT_S, self._overdue, slot)
        try:
            handed = await slot
        except asyncio.CancelledError:
            if slot.done() and not slot.cancelled() and slot.result():
                self.release()  # handed over just as the request was cancelled: pass it on
            elif slot in self._waiting:
                self._waiting.remove(slot)
            raise
        finally:
            timer.cancel()
        if not handed:
            log.error(
                "[Internal Error] Ensemble '%s' unable to schedule step %d (inflight: %d >= limit: %d) "
                "for %d seconds. Proceeding to avoid deadlock.",
                self.ensemble, self.step, self.count, self.cap, WAIT_S,
            )  # fmt: skip
            self.count += 1

    def release(self) -> None:
        """Free a slot: the longest-waiting request takes it over (the count stays), or it is free.
        Over the cap (after a wait ran out) it is only given up."""
        waiting = self._waiting
        while waiting and self.count <= self.cap:
            slot = waiting.popleft()
            if not slot.done():
                slot.set_result(True)
                return
        self.count -= 1

    def _overdue(self, slot: asyncio.Future[bool]) -> None:
        if not slot.done():
            self._waiting.remove(slot)
            slot.set_result(False)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *_: object) -> None:
        self.release()
