"""One thread per model instance.

Backends are synchronous (they block in framework code), so each instance gets a dedicated thread and
the event loop only hands it work and is woken with the result.  A dedicated thread rather than a shared
pool keeps Triton's guarantee that one instance runs one execution at a time, and lets frameworks that
keep thread-local state (CUDA streams, Python model globals) find it on the same thread every time.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from naiad.backends.base import ExecuteResult, ModelInstance
from naiad.core.request import InferRequest

_Job = tuple[Callable[[], Any], asyncio.Future[Any], asyncio.AbstractEventLoop]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the waiter was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class InstanceWorker:
    """Runs calls for one instance on its own thread, in submission order."""

    def __init__(self, instance: ModelInstance, name: str) -> None:
        self.instance = instance
        self.name = name
        self.inflight = 0
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"naiad-{name}", daemon=True)
        self._thread.start()

    def execute(self, requests: Sequence[InferRequest]) -> asyncio.Future[list[ExecuteResult]]:
        """Queue ``requests`` for this instance; the future resolves on the event loop."""
        return self.call(lambda: self.instance.execute(requests))

    def call(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self.inflight += 1
        future.add_done_callback(self._done)
        self._jobs.put((fn, future, loop))
        return future

    def _done(self, _: asyncio.Future[Any]) -> None:
        self.inflight -= 1

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, future, loop = job
            if future.cancelled():
                continue
            try:
                result, error = fn(), None
            except BaseException as exc:  # handed to the waiter, never lost on this thread
                result, error = None, exc
            try:
                loop.call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:  # the loop closed while we ran: nobody is waiting any more
                pass

    def close(self, timeout: float = 30.0) -> None:
        """Stop after queued work, then release the instance (on its own thread)."""
        done = threading.Event()

        def finish() -> None:
            try:
                self.instance.close()
            finally:
                done.set()

        self._jobs.put((finish, _DetachedFuture(), _NO_LOOP))
        self._jobs.put(None)
        done.wait(timeout)
        self._thread.join(timeout)


class _DetachedFuture:
    """Stands in for a future nobody awaits (the close job)."""

    def cancelled(self) -> bool:
        return False


class _NoLoop:
    def call_soon_threadsafe(self, *_: Any) -> None:
        return None


_NO_LOOP: Any = _NoLoop()
