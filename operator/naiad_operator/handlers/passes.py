"""Passes over an InferenceService run as background tasks, one at a time per object, never inside a
kopf handler.

A pass may wait minutes (a large model loading on every pod) and a canary waits on purpose between
its steps. Done inside handlers, that held up whatever else the handler had to do: a repository that
moved reconciled its InferenceServices one after the other, so one slow load stalled the others, and
a spec change queued behind the pass it was meant to replace. Here a handler only asks for a pass and
returns. Requests while a pass runs coalesce into one more pass after it; a spec change cancels the
running pass (its in-flight calls are dropped; the next pass plans again from what pods report) and a
pending wake-up, and starts over; a canary's pause is a wake-up timer, not a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Run = Callable[[], Awaitable[None]]


class Passes:
    """The running pass, a pending repeat and a wake-up timer per object key."""

    def __init__(self) -> None:
        self._running: dict[str, asyncio.Task[None]] = {}
        self._again: dict[str, Run] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def request(self, key: str, run: Run) -> None:
        """A pass soon: now when none runs, else once the running one ends."""
        task = self._running.get(key)
        if task is not None and not task.done():
            self._again[key] = run
            return
        self._start(key, run)

    def restart(self, key: str, run: Run) -> None:
        """The object's spec changed: drop the running pass and any wake-up, and pass again now."""
        self._cancel_timer(key)
        self._again.pop(key, None)
        task = self._running.pop(key, None)
        if task is not None and not task.done():
            task.cancel()
        self._start(key, run)

    def wake(self, key: str, delay: float, run: Run) -> None:
        """A pass in ``delay`` seconds (replacing an earlier wake-up of this object)."""
        self._cancel_timer(key)
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(max(0.0, delay), self._woken, key, run)

    def forget(self, key: str) -> None:
        """The object is gone: no more passes."""
        self._cancel_timer(key)
        self._again.pop(key, None)
        task = self._running.pop(key, None)
        if task is not None:
            task.cancel()

    async def close(self) -> None:
        for key in list(self._timers):
            self._cancel_timer(key)
        tasks = list(self._running.values())
        self._running.clear()
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def running(self, key: str) -> bool:
        task = self._running.get(key)
        return task is not None and not task.done()

    def _woken(self, key: str, run: Run) -> None:
        self._timers.pop(key, None)
        self.request(key, run)

    def _cancel_timer(self, key: str) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _start(self, key: str, run: Run) -> None:
        # a copy of the caller's context: kopf.event() finds kopf's Event queue there (see watches.attach)
        context = contextvars.copy_context()
        self._running[key] = asyncio.create_task(self._loop(key, run), context=context)

    async def _loop(self, key: str, run: Run) -> None:
        try:
            while True:
                try:
                    await run()
                except asyncio.CancelledError:
                    raise
                except Exception:  # logged; the periodic passes try again
                    log.exception("pass over %s failed", key)
                again = self._again.pop(key, None)
                if again is None:
                    return
                run = again
        finally:
            if self._running.get(key) is asyncio.current_task():
                del self._running[key]
