"""The default scheduler: one execution per request, instances running side by side.

Without a ``dynamic_batching`` or ``sequence_batching`` section Triton gives each request its own
execution and spreads requests over the model's instances.  Requests go to the instance with the least
work in flight, and wait on that instance's queue in arrival order.
"""

from __future__ import annotations

from collections.abc import Sequence

from naiad.core.errors import InferenceServerError, InternalError
from naiad.core.request import InferRequest, InferResponse
from naiad.scheduling.worker import InstanceWorker


class DirectScheduler:
    def __init__(self, workers: Sequence[InstanceWorker]) -> None:
        if not workers:
            raise ValueError("a scheduler needs at least one instance")
        self._workers = list(workers)

    async def submit(self, request: InferRequest) -> InferResponse:
        worker = self._workers[0]
        if len(self._workers) > 1:
            worker = min(self._workers, key=lambda w: w.inflight)
        try:
            results = await worker.execute((request,))
        except InferenceServerError:
            raise
        except Exception as exc:
            raise InternalError(f"{type(exc).__name__}: {exc}") from exc
        if len(results) != 1:
            raise InternalError(f"backend returned {len(results)} responses for 1 request")
        result = results[0]
        if isinstance(result, InferenceServerError):
            raise result
        return result

    def close(self) -> None:
        for worker in self._workers:
            worker.close()
