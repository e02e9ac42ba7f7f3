"""One acting replica among several: the operator leads only while it holds the Lease.

A replica waits in kopf's startup (before any watch starts, so a standby writes nothing, not even kopf's
finalizers or annotations), then renews in the background. A leader that cannot renew before its
deadline exits the process at once, as client-go's leader election does: finishing its handlers
gracefully would keep acting on objects a new leader already acts on. Everything it might leave half
done (a stage of a rollout, a sync Job) is resumed by the next leader from what the cluster and the
server pods say, which is what the chaos tests check.
"""

from __future__ import annotations

import asyncio
import socket
import time
from datetime import UTC, datetime
from types import TracebackType
from urllib.parse import urlsplit

from aiohttp import web

from naiad_operator.k8s import lease
from naiad_operator.k8s.client import Kube
from naiad_operator.k8s.errors import APIError
from naiad_operator.reconcile import leadership
from naiad_operator.settings import OperatorSettings


class Elector:
    def __init__(self, kube: Kube, settings: OperatorSettings) -> None:
        self.kube = kube
        self.me = settings.leader_identity or socket.gethostname()
        self.namespace = settings.leader_namespace or (settings.namespaces or ["default"])[0]
        self.name = settings.leader_lease_name
        self.duration = settings.leader_lease_seconds
        self.period = settings.leader_renew_seconds
        self.deadline = settings.leader_lease_seconds * 2 / 3

    async def _try(self) -> bool:
        now = datetime.now(UTC)
        found = await lease.read(self.kube, self.namespace, self.name)
        if found is None:
            spec = leadership.held_spec(leadership.parse(None), self.me, now, self.duration)
            return await lease.create(self.kube, self.namespace, self.name, spec)
        spec, version = found
        record = leadership.parse(spec)
        if not leadership.may_hold(record, self.me, now):
            return False
        held = leadership.held_spec(record, self.me, now, self.duration)
        return await lease.write_if_unchanged(self.kube, self.namespace, self.name, version, held)

    async def acquire(self) -> None:
        """Return once this replica holds the Lease (API errors only delay that)."""
        while True:
            try:
                if await self._try():
                    return
            except APIError:
                pass
            await asyncio.sleep(self.period)

    async def keep(self) -> None:
        """Renew until leadership is lost: another replica holds the Lease, or no renewal went
        through for the renew deadline (two thirds of the lease, so we stop before anyone may take it)."""
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.period)
            try:
                if not await self._try():
                    return
                renewed = time.monotonic()
            except APIError:
                if time.monotonic() - renewed > self.deadline:
                    return

    async def release(self) -> None:
        """On a graceful stop: hand the Lease over now rather than after it runs out."""
        found = await lease.read(self.kube, self.namespace, self.name)
        if found is None or leadership.parse(found[0]).holder != self.me:
            return
        spec = {**found[0], "holderIdentity": "", "leaseDurationSeconds": 1}
        await lease.write_if_unchanged(self.kube, self.namespace, self.name, found[1], spec)


class StandbyLiveness:
    """The liveness endpoint, answered while this replica waits for the Lease.

    kopf serves ``--liveness`` only once the startup handlers have returned, and a standby waits in them:
    with nothing listening, the kubelet's liveness probe fails and restarts the standby over and over
    (restarts that look like a fault, and a standby in back-off takes over late). A waiting standby is
    healthy, so it answers the same address itself, and frees the port the moment it leads, for kopf's
    own endpoint. ``url`` None (no liveness endpoint configured): nothing to answer."""

    def __init__(self, url: str | None, lease_name: str) -> None:
        self.url, self.lease_name = url, lease_name
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> StandbyLiveness:
        if not self.url:
            return self
        parts = urlsplit(self.url)
        app = web.Application()
        app.router.add_get(parts.path or "/", self._answer)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, parts.hostname or "0.0.0.0", parts.port or 80).start()
        return self

    async def _answer(self, _: web.Request) -> web.Response:
        return web.json_response({"standby": f"waiting for Lease {self.lease_name}"})

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
