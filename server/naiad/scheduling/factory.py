"""Which scheduler a model version gets, from its configuration.

The repository creates a version's instances and asks here for the scheduler that feeds them, so the
scheduling policy (default, dynamic batching, sequence batching...) is decided in one place that knows
nothing of how models are found or loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from naiad.scheduling.dynamic_batcher import DynamicBatchScheduler
from naiad.scheduling.policy import policy_of
from naiad.scheduling.scheduler import Scheduler
from naiad.scheduling.worker import InstanceWorker


def create_scheduler(config: Any, workers: Sequence[InstanceWorker]) -> Scheduler:
    """The scheduler for a model version whose normalized ``ModelConfig`` is ``config``.

    Raises :class:`~naiad.core.errors.InvalidArgumentError` for an invalid ``dynamic_batching``
    section (the version then fails to load with that reason).  ``workers`` belong to the scheduler
    from here on, even when this raises.
    """
    try:
        policy = policy_of(config)
    except BaseException:
        for worker in workers:
            worker.close()
        raise
    return DynamicBatchScheduler(policy, workers)
