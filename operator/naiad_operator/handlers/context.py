"""What every handler shares: settings, the API client, the pod client and per-object locks.

kopf runs timers concurrently with change handlers, so two passes over one object could overlap (and,
say, both start a sync Job). Each pass takes the object's lock (by kind, namespace and name) and then
reads the object, so it acts on the newest status, including what the previous pass just wrote.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from naiad_operator.handlers.passes import Passes
from naiad_operator.k8s.cache import Cache
from naiad_operator.k8s.client import Kube
from naiad_operator.k8s.modelserver import ModelServer
from naiad_operator.k8s.pods import PodResolver, pod_address
from naiad_operator.metrics import Metrics
from naiad_operator.reconcile.canary import Baseline
from naiad_operator.reconcile.demand import RequestSample
from naiad_operator.reconcile.rollout import Routing
from naiad_operator.settings import OperatorSettings


@dataclass
class OperatorContext:
    settings: OperatorSettings
    kube: Kube
    server: ModelServer
    resolve: PodResolver = pod_address
    metrics: Metrics = field(default_factory=Metrics)
    locks: defaultdict[str, asyncio.Lock] = field(default_factory=lambda: defaultdict(asyncio.Lock))
    cache: Cache = field(init=False)
    """Reads from the watches (kopf indexes), attached by the first handler call."""
    queued: set[str] = field(default_factory=set)
    fingerprints: dict[str, str] = field(default_factory=dict)
    services: Mapping[Any, Iterable[str]] = field(default_factory=dict)
    """InferenceService names by (namespace, label value): what the periodic passes go over."""
    repositories: Mapping[Any, Iterable[str]] = field(default_factory=dict)
    handler_context: contextvars.Context | None = None
    """A kopf handler's context variables (its Event queue), for passes that run outside handlers."""
    """The last status seen of each watched child, so only real changes trigger a pass."""
    """Objects with a triggered pass waiting for their lock (see ``watches.nudge``)."""
    jitter: Callable[[], float] = field(default_factory=lambda: random.Random().random)
    """Draws in [0, 1) that spread retry delays (reconcile code takes the number, never the source)."""
    passes: Passes = field(default_factory=Passes)
    """InferenceService passes, run in the background (``handlers.passes``)."""
    routes: dict[tuple[str, str, str], Routing] = field(default_factory=dict)
    """The routing (canary weights, mirror) last set per (InferenceService uid, pod, model): a pod's
    index does not show it. Lost on restart, which only means setting it once more."""
    baselines: dict[tuple[str, str], Baseline] = field(default_factory=dict)
    """The scrape each running canary step's window starts from, per (InferenceService uid, model)."""
    request_samples: dict[str, RequestSample] = field(default_factory=dict)
    """The request counts each InferenceService's open rate window started from, by uid (lost on a
    restart: the first window after it reports no rate yet)."""

    def __post_init__(self) -> None:
        self.cache = Cache(self.kube)

    async def close(self) -> None:
        await self.passes.close()
        self.metrics.close()
        await self.server.close()
        await self.kube.close()
