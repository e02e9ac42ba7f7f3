"""The scheduler contract between the data plane and a model version's instances."""

from __future__ import annotations

from typing import Protocol

from naiad.core.request import InferRequest, InferResponse
from naiad.scheduling.stats import SchedulerStats


class Scheduler(Protocol):
    """Accepts validated requests for one model version and answers each with its response."""

    #: What the scheduler counted since the version loaded (read by statistics and metrics).
    stats: SchedulerStats

    async def submit(self, request: InferRequest) -> InferResponse:
        """Run ``request`` on some instance; raise ``InferenceServerError`` on failure.

        Cancelling the caller takes a still-queued request out of the queue.
        """
        ...

    def close(self) -> None:
        """Refuse new requests, finish queued and running ones, then release every instance.

        Blocking: call it off the event loop.
        """
        ...
