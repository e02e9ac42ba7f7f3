"""Cancelling inference requests whose HTTP client went away.

A client that disconnects while its request waits in a model's queue should not have the model run
it: cancelling the handler's task takes the request out of the queue (the scheduler counts it as
CANCELED).  Noticing a disconnect means awaiting ASGI ``receive()``, which after the body returns
only on disconnect (or once the response is sent), in a task of its own.  One such task per request
costs about a tenth of the throughput of a small model, and a request answered within milliseconds
has nothing to gain from it, so only requests still in flight after ``grace`` seconds are watched:
a timer, running only while requests are in flight, starts a watch for those it saw on its previous
round.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from naiad.core.errors import CancelledError
from naiad.frontends.http.asgi import Receive

T = TypeVar("T")

#: The cancel message that marks a task cancelled because its client disconnected.
_DISCONNECTED = "naiad: client disconnected"


class DisconnectWatch:
    """Runs request handlers' awaits so that a disconnect of their client cancels them."""

    def __init__(self, grace: float = 0.02) -> None:
        self._grace = grace
        self._young: dict[asyncio.Task[object], Receive] = {}  # not seen by the timer yet
        self._old: dict[asyncio.Task[object], Receive] = {}  # seen once: watched at the next round
        self._watches: dict[asyncio.Task[object], asyncio.Future[object]] = {}
        self._timer: asyncio.TimerHandle | None = None
        #: The server's loop, learned at the first request: ``current_task()`` without it asks for the
        #: running loop, a ``getpid`` system call per request on Python 3.11 (its fork check).
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self, awaitable: Awaitable[T], receive: Receive) -> T:
        """``await awaitable``; CANCELLED if the client disconnects before it is done."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None
        self._young[task] = receive
        if self._timer is None:
            self._timer = loop.call_later(self._grace, self._round)
        try:
            return await awaitable
        except asyncio.CancelledError as exc:
            if exc.args != (_DISCONNECTED,) or task.uncancel():
                raise  # cancelled by someone else (server shutdown): let it through
            raise CancelledError("the client disconnected before its response") from None
        finally:
            if self._young.pop(task, None) is None and self._old.pop(task, None) is None:
                self._watches.pop(task).cancel()

    def _round(self) -> None:
        self._timer = None
        for task, receive in self._old.items():
            self._watches[task] = self._watch(task, receive)
        self._old, self._young = self._young, {}
        if self._old:
            assert self._loop is not None  # a round follows a request
            self._timer = self._loop.call_later(self._grace, self._round)

    @staticmethod
    def _watch(task: asyncio.Task[object], receive: Receive) -> asyncio.Future[object]:
        watch: asyncio.Future[object] = asyncio.ensure_future(receive())

        def received(message: asyncio.Future[object]) -> None:
            if message.cancelled() or message.exception() is not None:
                return
            event = message.result()
            if isinstance(event, dict) and event.get("type") == "http.disconnect":
                task.cancel(_DISCONNECTED)

        watch.add_done_callback(received)
        return watch
