"""POLL mode: rescan the repositories every ``--repository-poll-secs`` and apply what changed.

A model folder is compared by its fingerprint (paths, sizes, modification times).  A change is acted
on only once it is the same in two consecutive scans, so a model still being copied, or a version
folder still being written, is not loaded half-written; Triton warns that its own POLL mode has no
such guard.  Added models and changed ones are (re)loaded make-before-break, removed ones unloaded and
forgotten; a failed reload keeps the old model serving and is not retried until the folder changes
again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from naiad.repository.fingerprint import folder_fingerprint
from naiad.repository.layout import ModelLocation, describe
from naiad.repository.sync.engine import SyncError

if TYPE_CHECKING:
    from naiad.repository.manager import ModelRepository

log = logging.getLogger("naiad.repository")


class Poller:
    """Follows the repositories of one :class:`ModelRepository`."""

    def __init__(self, repository: ModelRepository, interval: float) -> None:
        self.repository = repository
        self.interval = interval
        self._applied: dict[str, str] = {}
        self._seen: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None

    async def prime(self, locations: dict[str, ModelLocation]) -> None:
        """Take the state the initial load starts from as already applied."""
        self._applied = await asyncio.to_thread(_fingerprints, locations)
        self._seen = dict(self._applied)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="naiad-repository-poll")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.poll()
            except SyncError as exc:
                log.warning("repository poll skipped: %s", exc.message)
            except Exception:  # the poller must outlive any single bad poll
                log.exception("repository poll failed")

    async def poll(self) -> None:
        """One scan: act on every change seen identically in the previous scan."""
        locations = await self.repository.refresh()
        current = await asyncio.to_thread(_fingerprints, locations)
        actions: list[Coroutine[Any, Any, object]] = []
        for name in sorted(set(current) | set(self._applied)):
            state = current.get(name)
            if state == self._applied.get(name) or state != self._seen.get(name):
                continue
            if state is None:
                log.info("model '%s' was removed from the repository: unloading", describe(name))
                del self._applied[name]
                actions.append(self.repository.forget(name))
            else:
                log.info("model '%s' changed in the repository: loading", describe(name))
                self._applied[name] = state
                actions.append(self.repository.try_load(name))
        self._seen = current
        await asyncio.gather(*actions)


def _fingerprints(locations: dict[str, ModelLocation]) -> dict[str, str]:
    return {name: folder_fingerprint([loc.path, *loc.duplicates]) for name, loc in locations.items()}
