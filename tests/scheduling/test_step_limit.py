"""An ensemble step's shared cap (``max_inflight_requests``): waiters served in order, a cancelled
waiter never keeps a slot, and a wait that runs out proceeds over the cap with Triton's error line."""

from __future__ import annotations

import asyncio
import logging

import pytest
from naiad.scheduling import step_limit
from naiad.scheduling.step_limit import StepLimit


async def _started(coroutine: object) -> asyncio.Task[None]:
    task = asyncio.ensure_future(coroutine)  # type: ignore[call-overload]
    await asyncio.sleep(0)
    return task


def test_waiters_take_freed_slots_in_the_order_they_asked() -> None:
    async def test() -> None:
        limit = StepLimit(2, "e", 1)
        await limit.acquire()
        await limit.acquire()
        order: list[str] = []

        async def wait(name: str) -> None:
            await limit.acquire()
            order.append(name)

        first, second = await _started(wait("first")), await _started(wait("second"))
        assert order == [] and limit.count == 2
        limit.release()
        await first
        assert order == ["first"] and limit.count == 2 and not second.done()
        limit.release()
        await second
        assert order == ["first", "second"]
        for _ in range(2):
            limit.release()
        assert limit.count == 0
        await limit.acquire()  # free again: no wait
        assert limit.count == 1

    asyncio.run(asyncio.wait_for(test(), 5))


def test_a_cancelled_waiter_leaves_the_line_and_a_slot_handed_to_it_passes_on() -> None:
    async def test() -> None:
        limit = StepLimit(1, "e", 0)
        await limit.acquire()
        gone = await _started(limit.acquire())
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        limit.release()
        assert limit.count == 0  # nobody was waiting any more

        await limit.acquire()
        handed = await _started(limit.acquire())
        after = await _started(limit.acquire())
        limit.release()  # handed to ``handed``, which is cancelled before it runs
        handed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await handed
        await after  # the slot went on to the next in line
        assert limit.count == 1

    asyncio.run(asyncio.wait_for(test(), 5))


def test_a_wait_that_runs_out_proceeds_over_the_cap_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(step_limit, "WAIT_S", 0.05)

    async def test() -> None:
        limit = StepLimit(1, "ens", 2)
        await limit.acquire()
        await limit.acquire()  # waits 0.05 s, then goes ahead
        assert limit.count == 2
        monkeypatch.setattr(step_limit, "WAIT_S", 5.0)
        waiting = await _started(limit.acquire())
        limit.release()  # over the cap: the slot is given up, not handed on
        await asyncio.sleep(0.01)
        assert not waiting.done() and limit.count == 1
        limit.release()
        await waiting
        assert limit.count == 1

    with caplog.at_level(logging.ERROR, logger="naiad.scheduling.step_limit"):
        asyncio.run(asyncio.wait_for(test(), 5))
    assert caplog.messages[0] == (
        "[Internal Error] Ensemble 'ens' unable to schedule step 2 (inflight: 1 >= limit: 1) "
        "for 0 seconds. Proceeding to avoid deadlock."
    )
