"""Background passes: requests while a pass runs coalesce into one more, a spec change cancels the pass in
flight, a wake-up comes after its delay and a newer one replaces it."""

from __future__ import annotations

import asyncio

from naiad_operator.handlers.passes import Passes


async def _settle(passes: Passes, key: str) -> None:
    while passes.running(key):
        await asyncio.sleep(0.01)


def test_requests_during_a_pass_coalesce_into_one_more() -> None:
    async def scenario() -> list[str]:
        passes, log = Passes(), []
        release = asyncio.Event()

        async def slow() -> None:
            log.append("slow")
            await release.wait()

        async def quick() -> None:
            log.append("quick")

        passes.request("k", slow)
        await asyncio.sleep(0)
        for _ in range(5):
            passes.request("k", quick)
        passes.request("other", quick)  # another object is not held up by k
        await asyncio.sleep(0.05)
        assert log == ["slow", "quick"]
        release.set()
        await _settle(passes, "k")
        await passes.close()
        return log

    assert asyncio.run(scenario()) == ["slow", "quick", "quick"]


def test_a_restart_cancels_the_pass_in_flight_and_a_wake_up() -> None:
    async def scenario() -> list[str]:
        passes, log = Passes(), []

        async def stuck() -> None:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                log.append("cancelled")
                raise

        async def fresh() -> None:
            log.append("fresh")

        passes.request("k", stuck)
        await asyncio.sleep(0.01)
        passes.wake("k", 0.05, stuck)
        passes.restart("k", fresh)
        await asyncio.sleep(0.1)  # the cancelled wake-up never runs ``stuck`` again
        await _settle(passes, "k")
        await passes.close()
        return log

    assert asyncio.run(scenario()) == ["cancelled", "fresh"]


def test_a_newer_wake_up_replaces_the_earlier_one() -> None:
    async def scenario() -> list[str]:
        passes, log = Passes(), []

        async def first() -> None:
            log.append("first")

        async def second() -> None:
            log.append("second")

        passes.wake("k", 0.02, first)
        passes.wake("k", 0.04, second)
        await asyncio.sleep(0.1)
        await passes.close()
        return log

    assert asyncio.run(scenario()) == ["second"]
