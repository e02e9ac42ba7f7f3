"""The scheduler contract between the data plane and a model version's instances."""

from __future__ import annotations

from typing import Protocol

from naiad.core.errors import InferenceServerError
from naiad.core.request import InferRequest, InferResponse
from naiad.scheduling.stats import SchedulerStats


class Waiter(Protocol):
    """Who waits for a request a scheduler started with :meth:`Scheduler.start_at_once`."""

    #: Set once the caller went away (its client disconnected): the result is then counted as
    #: cancelled, as that of a request whose future was cancelled, and not delivered.
    abandoned: bool

    def settle(self, result: InferResponse | InferenceServerError) -> None:
        """The request's result (on the loop, never from within ``start_at_once``)."""
        ...


class Scheduler(Protocol):
    """Accepts validated requests for one model version and answers each with its response."""

    #: What the scheduler counted since the version loaded (read by statistics and metrics).
    stats: SchedulerStats

    async def submit(self, request: InferRequest) -> InferResponse:
        """Run ``request`` on some instance; raise ``InferenceServerError`` on failure.

        Cancelling the caller takes a still-queued request out of the queue.
        """
        ...

    @property
    def starts_at_once(self) -> bool:
        """Whether :meth:`start_at_once` may start requests (it may still refuse one, when closing)."""
        ...

    def start_at_once(self, request: InferRequest, waiter: Waiter) -> bool:
        """Start ``request`` now, as ``submit`` would, and give ``waiter`` its result; False, with
        nothing done, where ``submit`` would not start it at once (a queue, a sequence, an ensemble)."""
        ...

    def close(self) -> None:
        """Refuse new requests, finish queued and running ones, then release every instance.

        Blocking: call it off the event loop.
        """
        ...
