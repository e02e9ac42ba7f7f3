"""The level-triggered safety net: every object gets a pass on a fixed period, from one loop per kind.

kopf's per-object timers would do the same, but kopf puts a finalizer on every object that has a
timer (kopf#1074): uninstall the operator before its resources and they, and their namespaces, stay
Terminating until someone removes the finalizer by hand. One loop per kind over the watched objects
(a kopf index) needs no finalizer, so nothing the operator manages ever waits for the operator to be
deleted. Passes coalesce with the ones watch events trigger (``watches.nudge``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import kopf

from naiad_operator.handlers import inferenceservice, repository
from naiad_operator.handlers.context import OperatorContext
from naiad_operator.handlers.startup import context_of

log = logging.getLogger(__name__)

Tick = Callable[[OperatorContext, str, str], Awaitable[None]]


async def every(
    ctx: OperatorContext, interval: float, objects: Callable[[], Mapping[Any, Iterable[str]]], tick: Tick
) -> None:
    """Forever: every ``interval`` seconds, a pass over each object (concurrently, one per object)."""
    running: dict[tuple[str, str], asyncio.Task[None]] = {}
    while True:
        await asyncio.sleep(interval)
        for (namespace, _), found in list(objects().items()):
            for name in list(found):
                key = (namespace, name)
                if key in running and not running[key].done():
                    continue  # the last pass over it is still running (a long rollout): no pile-up
                context = ctx.handler_context.copy() if ctx.handler_context is not None else None
                running[key] = asyncio.create_task(_pass(ctx, tick, namespace, name), context=context)
        for key in [k for k, task in running.items() if task.done()]:
            del running[key]


async def _pass(ctx: OperatorContext, tick: Tick, namespace: str, name: str) -> None:
    try:
        await tick(ctx, namespace, name)
    except Exception:  # a failed pass is logged and counted; the next period tries again
        log.exception("periodic pass over %s/%s failed", namespace, name)


async def stop(tasks: Iterable[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@kopf.on.startup()
async def start(memo: kopf.Memo, **_: Any) -> None:
    """One loop per kind, once the shared context exists (``startup.start``)."""
    if "context" not in memo:
        raise kopf.TemporaryError("waiting for the operator context", delay=0.1)
    ctx = context_of(memo)
    settings = ctx.settings
    memo["periodic"] = [
        asyncio.create_task(
            every(ctx, settings.reconcile_interval, lambda: ctx.services, inferenceservice.tick)
        ),
        asyncio.create_task(
            every(ctx, settings.sync_poll_interval, lambda: ctx.repositories, repository.tick)
        ),
    ]


@kopf.on.cleanup()
async def halt(memo: kopf.Memo, **_: Any) -> None:
    await stop(memo.get("periodic") or [])
