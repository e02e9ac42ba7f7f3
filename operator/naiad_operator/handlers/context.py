"""What every handler shares: settings, the API client, the pod client and per-object locks.

kopf runs timers concurrently with change handlers, so two passes over one object could overlap (and,
say, both start a sync Job). Each pass takes the object's lock and re-reads the object first, so it acts
on the newest status, including what the previous pass just wrote.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field

from naiad_operator.k8s.client import Kube
from naiad_operator.k8s.modelserver import ModelServer
from naiad_operator.k8s.pods import PodResolver, pod_address
from naiad_operator.settings import OperatorSettings


@dataclass
class OperatorContext:
    settings: OperatorSettings
    kube: Kube
    server: ModelServer
    resolve: PodResolver = pod_address
    locks: defaultdict[str, asyncio.Lock] = field(default_factory=lambda: defaultdict(asyncio.Lock))

    async def close(self) -> None:
        await self.server.close()
        await self.kube.close()
