"""Which scheduler a model version gets, from its configuration.

The repository creates a version's instances and asks here for the scheduler that feeds them, so the
scheduling policy (default, dynamic batching, sequence batching...) is decided in one place that knows
nothing of how models are found or loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from naiad.scheduling.dynamic_batcher import DynamicBatchScheduler
from naiad.scheduling.policy import policy_of
from naiad.scheduling.rate_limiter import RateLimiter
from naiad.scheduling.scheduler import Scheduler
from naiad.scheduling.sequence_batcher import SequenceBatchScheduler
from naiad.scheduling.sequence_settings import sequence_settings_of
from naiad.scheduling.start_delay import NO_DELAY, StartDelay
from naiad.scheduling.stats import FIRST_RESPONSE_BOUNDS_MS, FIRST_RESPONSE_FAMILY, SchedulerStats
from naiad.scheduling.worker import InstanceWorker

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

log = logging.getLogger("naiad")


def create_scheduler(
    config: mc.ModelConfig,
    workers: Sequence[InstanceWorker],
    model_dir: Path,
    limiter: RateLimiter | None = None,
    start_delay: StartDelay = NO_DELAY,
) -> Scheduler:
    """The scheduler for a model version whose normalized ``ModelConfig`` is ``config``.

    ``model_dir`` is the model's folder, where the sequence batcher finds ``initial_state`` files;
    ``limiter`` is the server's rate limiter (``--rate-limit=execution_count``), ``None`` when off;
    ``start_delay``: Triton's start delays (:mod:`naiad.scheduling.start_delay`).

    Raises :class:`~naiad.core.errors.InvalidArgumentError` for an invalid ``dynamic_batching`` or
    ``sequence_batching`` section, or for instance resources the rate limiter can never grant (the
    version then fails to load with that reason).  ``workers``
    belong to the scheduler from here on, even when this raises.
    """
    try:
        if limiter is not None:
            limiter.attach(config, workers)
        scheduler: Scheduler = (
            SequenceBatchScheduler(sequence_settings_of(config, model_dir), workers, start_delay)
            if config.HasField("sequence_batching")
            else DynamicBatchScheduler(policy_of(config), workers, start_delay)
        )
    except BaseException:
        for worker in workers:
            worker.close()
        raise
    if SchedulerStats.first_responses:
        decoupled = config.model_transaction_policy.decoupled
        scheduler.stats.count_first_responses(first_response_bounds(config), decoupled)
    return scheduler


def first_response_bounds(config: mc.ModelConfig) -> tuple[float, ...]:
    """The bucket bounds (ms) of the model's first-response histogram: its ``model_metrics``' for
    Triton's family, else Triton's defaults.  A section naming another family is ignored with
    Triton's warning (it may name a backend's metric some day)."""
    bounds = FIRST_RESPONSE_BOUNDS_MS
    for control in config.model_metrics.metric_control:
        family = control.metric_identifier.family
        if family == FIRST_RESPONSE_FAMILY:
            bounds = tuple(control.histogram_options.buckets)
        else:
            why = "in 'metric_identifier' is not a customizable metric in Triton core."
            log.warning("Metric family '%s' %s", family, why)
    return bounds
