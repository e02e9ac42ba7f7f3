"""Frontend worker processes: started, watched, restarted, kept in line, stopped.

The engine creates each worker's channel (a socketpair) and arenas (memfds) and passes them down at
spawn, so nothing is named on disk and nothing outlives the processes that hold it.  A worker that
exits for any reason while the server runs is started again; its requests still in the engine are
cancelled.  Changes of shared state are *broadcast*: sent to every worker, and a control call that made
one answers only after every live worker acknowledged it, so the next request, through any worker,
sees it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Hashable
from typing import Any

import msgspec

from naiad.core.errors import UnsupportedError
from naiad.dataplane import DataPlane
from naiad.engine import catalog
from naiad.engine.link import PublishedSignatures, WorkerLink
from naiad.ipc import arena
from naiad.ipc.arena import Arena, SharedArenas
from naiad.ipc.channel import connect, write_frame
from naiad.ipc.messages import LogChange, RegionChange, ToEngine, TraceChange, Welcome
from naiad.settings import ServerSettings

log = logging.getLogger("naiad.engine")

#: Bytes of each arena (request and response, per worker); pages are only used when touched.
ARENA_SIZE = 32 * 1024 * 1024
#: The part of a response arena beyond ``ARENA_SIZE`` kept for blocks reserved for a model process's
#: outputs when its execution is sent (``naiad.ipc.tensors.OutputPlacer.reserve``): they live until
#: the worker releases the answer, far longer than a response's block, and in the same ring would
#: hold back the reuse of every block allocated after them.  As large as the ring for responses: at 64
#: requests in flight of a model returning 588 KiB, 16 MiB held three blocks in eight, 32 MiB three in four.
LASTING_SIZE = 32 * 1024 * 1024
#: How often the engine checks whether its catalog changed (POLL reloads, readiness).
CATALOG_CHECK_SECS = 0.05
#: A worker that dies this soon after it started is restarted only after this pause.
RESTART_PAUSE_SECS = 1.0


def _encode_settings(settings: ServerSettings) -> bytes:
    return msgspec.json.encode(settings, enc_hook=str)


class FrontendWorkers:
    """``count`` workers over ``dataplane``; ``await start()``, later ``await stop(deadline)``."""

    def __init__(
        self, count: int, settings: ServerSettings, dataplane: DataPlane, lent: SharedArenas | None = None
    ) -> None:
        self.count = count
        self.settings = settings
        self.dataplane = dataplane
        #: Where the workers' request arenas are lent to model processes (see ``SharedArenas``).
        self._lent = lent if lent is not None else SharedArenas()
        self.links: list[WorkerLink | None] = [None] * count
        self._processes: list[subprocess.Popen[bytes] | None] = [None] * count
        self._settings_json = _encode_settings(settings)
        self._ids = itertools.count(1)
        self._digest: Hashable = None
        self._replay: list[TraceChange | LogChange] = []
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self.published = PublishedSignatures()
        dataplane.shared_memory.retired = self._region_retired

    # ---- readiness and catalog ------------------------------------------------------------------

    def serving(self) -> bool:
        return all(link is not None and link.serving for link in self.links)

    def ready(self) -> bool:
        """The server's readiness: the engine's, and every worker serving."""
        return not self._stopping and self.dataplane.ready() and self.serving()

    def _catalog_message(self) -> Any:
        models = self.dataplane.registry.models()
        self._digest = catalog.digest(models, self.ready(), self.dataplane.started)
        message = catalog.catalog(next(self._ids), models, self.ready(), self.dataplane.started)
        self.published.update(message.id, models)
        return message

    async def publish(self, wait: bool) -> None:
        """Send every worker the current catalog; with ``wait``, until each applied it."""
        await self._broadcast(self._catalog_message(), wait)

    async def _watch_catalog(self) -> None:
        while not self._stopping:
            await asyncio.sleep(CATALOG_CHECK_SECS)
            if self._catalog_changed():
                await self.publish(wait=False)

    def _catalog_changed(self) -> bool:
        """Whether the catalog differs from the one published last."""
        models = self.dataplane.registry.models()
        return catalog.digest(models, self.ready(), self.dataplane.started) != self._digest

    async def _broadcast(self, message: Any, wait: bool) -> None:
        waiting = []
        for link in self.links:
            if link is None or link.lost.is_set():
                continue
            if wait:
                waiting.append(link.expect_ack(message.id))
            link.send(message)
        if waiting:
            await asyncio.wait(waiting, timeout=10)

    def _region_retired(self, name: str) -> None:
        """A region unregistered while requests held it went with the last of them: the workers'
        copies go too (sent before that request's answer, on the same channel)."""
        message = RegionChange(next(self._ids), name, None, 0, 0)
        for link in self.links:
            if link is not None and not link.lost.is_set():
                link.send(message)

    # ---- control calls from workers -------------------------------------------------------------

    async def call(self, method: str, args: list[msgspec.Raw]) -> Any:
        """A worker's control-plane call, made on the engine's data plane (then broadcast).

        A catalog that changed since the last one published goes out before the reply: the worker
        applies it first (its channel keeps order), so a client that read, say, the repository index
        on a worker is answered from at least that state by the same worker next (a model's
        readiness), without waiting for the watcher's next look (``CATALOG_CHECK_SECS``)."""
        try:
            return await self._call(method, args)
        finally:
            if self._catalog_changed():
                await self.publish(wait=False)

    async def _call(self, method: str, args: list[msgspec.Raw]) -> Any:
        dp = self.dataplane

        def arg(i: int, kind: Any) -> Any:
            return msgspec.msgpack.decode(args[i], type=kind)

        if method == "model_statistics":
            return await dp.model_statistics(arg(0, str), arg(1, str))
        if method == "repository_index":
            return await dp.repository_index(arg(0, bool))
        if method == "unready_reason":
            return await dp.unready_reason(arg(0, str), arg(1, int))
        if method == "trace_settings":
            return await dp.trace_settings(arg(0, str))
        if method == "log_settings":
            return await dp.log_settings()
        if method == "region_status":
            return await dp.region_status(arg(0, str))
        if method == "forwarded":
            dp.forwarded(arg(0, str))
            return None
        if method == "admit":
            try:
                await dp.admit(arg(0, str))
            finally:
                await self.publish(wait=True)
            return None
        if method in ("load_model", "unload_model"):
            try:
                if method == "load_model":
                    await dp.load_model(arg(0, str), arg(1, dict[str, Any]))
                else:
                    await dp.unload_model(arg(0, str), arg(1, bool))
            finally:
                await self.publish(wait=True)
            return None
        if method == "update_trace_settings":
            model, changes = arg(0, str), arg(1, dict[str, list[str] | None])
            result = await dp.update_trace_settings(model, changes)
            change = TraceChange(next(self._ids), model, changes)
            self._replay.append(change)
            await self._broadcast(change, wait=True)
            return result
        if method == "update_log_settings":
            log_changes = arg(0, dict[str, Any])
            result = await dp.update_log_settings(log_changes)
            update = LogChange(next(self._ids), msgspec.Raw(msgspec.msgpack.encode(log_changes)))
            self._replay.append(update)
            await self._broadcast(update, wait=True)
            return result
        if method == "register_region":
            name, key, offset, size = arg(0, str), arg(1, str), arg(2, int), arg(3, int)
            await dp.register_region(name, key, offset, size)
            await self._broadcast(RegionChange(next(self._ids), name, key, offset, size), wait=True)
            return None
        if method == "unregister_region":
            name = arg(0, str)
            before = {region.name for region in dp.shared_memory.status()}
            await dp.unregister_region(name)
            # The regions gone now; one a request in flight holds goes when it ends (_region_retired).
            gone = before.difference(region.name for region in dp.shared_memory.status())
            for each in sorted(gone):
                await self._broadcast(RegionChange(next(self._ids), each, None, 0, 0), wait=True)
            return None
        raise UnsupportedError(f"unknown engine call '{method}'")

    # ---- processes --------------------------------------------------------------------------------

    async def start(self) -> None:
        for index in range(self.count):
            self._tasks.append(asyncio.create_task(self._keep(index)))
        self._tasks.append(asyncio.create_task(self._watch_catalog()))

    async def _keep(self, index: int) -> None:
        """Run worker ``index``, and start it again whenever it ends while the server runs."""
        while not self._stopping:
            started = time.monotonic()
            link, process, lent = await self._spawn(index)
            await link.lost.wait()
            inflight = link.lost_inflight
            for key in lent:
                self._lent.remove(key)
            status = await asyncio.to_thread(process.wait)
            link.requests.close()
            link.responses.close()
            if self._stopping:
                return
            cause = f"signal {signal.Signals(-status).name}" if status < 0 else f"status {status}"
            log.error(
                "frontend worker %d (pid %d) ended with %s; %d request(s) it had in flight failed; "
                "starting it again",
                index,
                process.pid,
                cause,
                inflight,
            )
            self.links[index] = None
            await self.publish(wait=False)
            if time.monotonic() - started < RESTART_PAUSE_SECS:
                await asyncio.sleep(RESTART_PAUSE_SECS)

    async def _spawn(self, index: int) -> tuple[WorkerLink, subprocess.Popen[bytes], tuple[int, int]]:
        """Start worker ``index``: its link, its process, and the keys its request and response
        arenas are lent to model processes by."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        request_fd = arena.create(f"naiad-requests-{index}", ARENA_SIZE)
        response_fd = arena.create(f"naiad-responses-{index}", ARENA_SIZE + LASTING_SIZE)
        fds = (child.fileno(), request_fd, response_fd)
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "naiad.workers", *(str(fd) for fd in fds)],
                pass_fds=fds,
            )
            # writable: a model in the engine may change its inputs in place, as Triton's models may
            # (each request's block is its own; the worker does not read it again)
            requests = Arena(request_fd, ARENA_SIZE, writable=True)
            responses = Arena(response_fd, ARENA_SIZE + LASTING_SIZE, writable=True, lasting=LASTING_SIZE)
        except BaseException:
            os.close(request_fd)
            os.close(response_fd)
            raise
        finally:
            child.close()
        # (the table holds the descriptors from now on)
        lent = (self._lent.add(requests, request_fd), self._lent.add(responses, response_fd, shared=True))
        self._processes[index] = process
        await asyncio.to_thread(write_frame, parent, Welcome(index, self._settings_json, ARENA_SIZE))
        parent.setblocking(False)
        link = WorkerLink(
            index,
            self.dataplane,
            requests,
            responses,
            self.call,
            self._on_serving,
            self.published,
            request_key=lent[0],
            response_key=lent[1],
        )
        await connect(parent, ToEngine, link.on_message, link.on_lost, link.bind)
        self.links[index] = link
        link.send(self._catalog_message())
        for region in self.dataplane.shared_memory.status():
            link.send(RegionChange(0, region.name, region.key, region.offset, region.byte_size))
        for change in self._replay:
            link.send(change)
        return link, process, lent

    def _on_serving(self, link: WorkerLink) -> None:
        log.info("frontend worker %d serving", link.index)
        asyncio.get_running_loop().create_task(self.publish(wait=False))

    async def stop(self, deadline: float) -> None:
        """Stop being ready, ask every worker to drain (SIGTERM) and wait for them until ``deadline``
        (``time.monotonic()``); those still running then are killed."""
        self._stopping = True
        await self.publish(wait=False)
        for process in self._processes:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self._processes:
            if process is None:
                continue
            try:
                await asyncio.to_thread(process.wait, max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("frontend worker (pid %d) did not stop in time: killed", process.pid)
                process.kill()
                await asyncio.to_thread(process.wait)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def kill(self) -> None:
        """Kill every worker now (the engine is failing)."""
        for process in self._processes:
            if process is not None and process.poll() is None:
                process.kill()
