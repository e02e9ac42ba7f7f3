"""POLL mode: rescan the repositories every ``--repository-poll-secs`` and apply what changed.

A model folder is compared by its fingerprint (paths, sizes, modification times).  A change is acted
on at the scan that sees it, as Triton does, when it has settled: nothing in the folder changed for
:data:`SETTLED_S` (by ``ctime``, which a copy that keeps modification times cannot set back), or the
folder is in a synced snapshot of a cloud repository (complete by construction).  A change still under
way is acted on only once it is the same in two consecutive scans, so a model still being copied, or a
version folder still being written, is not loaded half-written; Triton warns that its own POLL mode has
no such guard.  (Waiting a second scan for every change made a change take up to two intervals where
Triton takes one: NVIDIA's ``L0_storage_S3_local`` checks a new version 20 s after its upload, at a
15 s interval.)  Added models and changed ones are (re)loaded make-before-break, removed ones unloaded
and forgotten at once; a failed reload keeps the old model serving and is not retried until the
folder changes again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from naiad.repository.fingerprint import folder_state
from naiad.repository.layout import ModelLocation, describe
from naiad.repository.sync.engine import SyncError

if TYPE_CHECKING:
    from naiad.repository.manager import ModelRepository

log = logging.getLogger("naiad.repository")

#: How long nothing in a model folder must have changed for a change to count as finished.
SETTLED_S = 2.0


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
        states = await asyncio.to_thread(_states, locations, ())
        self._applied = {name: fingerprint for name, (fingerprint, _) in states.items()}
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
        """One scan: act on every change that has settled or was seen identically in the previous scan."""
        locations = await self.repository.refresh()
        states = await asyncio.to_thread(_states, locations, self.repository.synced_folders())
        current = {name: fingerprint for name, (fingerprint, _) in states.items()}
        actions: list[Coroutine[Any, Any, object]] = []
        for name in sorted(set(current) | set(self._applied)):
            state = current.get(name)
            if state == self._applied.get(name):
                continue
            if state is not None and state != self._seen.get(name) and not states[name][1]:
                log.debug("model '%s' is changing in the repository: waiting until settled", describe(name))
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


def _states(locations: dict[str, ModelLocation], synced: Sequence[Path]) -> dict[str, tuple[str, bool]]:
    """Each model's fingerprint, and whether its folders have settled (see the module's note)."""
    now = time.time_ns()
    states: dict[str, tuple[str, bool]] = {}
    for name, location in locations.items():
        paths = [location.path, *location.duplicates]
        fingerprint, changed = folder_state(paths)
        in_snapshot = all(any(path.is_relative_to(folder) for folder in synced) for path in paths)
        states[name] = (fingerprint, in_snapshot or now - changed >= SETTLED_S * 1e9)
    return states
