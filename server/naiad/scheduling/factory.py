"""Which scheduler a model version gets, from its configuration.

The repository creates a version's instances and asks here for the scheduler that feeds them, so the
scheduling policy (direct, dynamic batching, sequence batching...) is decided in one place that knows
nothing of how models are found or loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from naiad.scheduling.direct import DirectScheduler
from naiad.scheduling.scheduler import Scheduler
from naiad.scheduling.worker import InstanceWorker


def create_scheduler(config: Any, workers: Sequence[InstanceWorker]) -> Scheduler:
    """The scheduler for a model version whose normalized ``ModelConfig`` is ``config``."""
    return DirectScheduler(workers)
