"""Whether a loaded model version is ready at run time, asked of its instances as Triton asks backends.

A READY version may still not serve: Triton asks each instance's backend at every model readiness
request (``TRITONBACKEND_ModelInstanceReady``), and its Python backend answers not ready while the
instance's stub process is not alive, or when the model's own ``is_ready()`` (Triton 25.12+) says
so, raises, answers something other than a bool, or has not answered within :data:`TIMEOUT_S`.
The first instance that is not ready gives the reason.  Each instance is asked one question at a
time: a request arriving while one is under way waits for that answer (up to :data:`TIMEOUT_S` too)
instead of asking again, and a question that timed out goes on, answering whoever waits then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Protocol, cast

#: How long a readiness request waits for an instance's answer (Triton's Python backend: 5 s).
TIMEOUT_S = 5.0
_ASKED_TOO_LONG = "Timed out waiting for user-defined is_ready() response"
_WAITED_TOO_LONG = "Timed out waiting for in-flight is_ready() response"


class Checked(Protocol):
    """An instance asked at each readiness request (a Python model's, see ``checks_readiness``)."""

    @property
    def checks_readiness(self) -> bool: ...

    def ask_readiness(self) -> Future[str]:
        """ "" once it is found ready, else why not; never blocks."""
        ...


class Readiness:
    """The instances of one version that are asked, and the question under way to each."""

    def __init__(self, instances: Sequence[Checked]) -> None:
        self._instances = list(instances)
        self._asked: list[Future[str] | None] = [None] * len(self._instances)

    async def reason(self) -> str:
        """ "" when every instance is ready, else why the first one that is not is not."""
        for index, instance in enumerate(self._instances):
            reason = await self._ask(index, instance)
            if reason:
                return reason
        return ""

    async def _ask(self, index: int, instance: Checked) -> str:
        asked = self._asked[index]
        waiting = asked is not None
        if asked is None:
            asked = self._asked[index] = instance.ask_readiness()
            asked.add_done_callback(lambda done: self._answered(index, done))
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(asked)), TIMEOUT_S)
        except TimeoutError:
            return _WAITED_TOO_LONG if waiting else _ASKED_TOO_LONG

    def _answered(self, index: int, done: Future[str]) -> None:
        """The next request asks again (from whichever thread gave the answer)."""
        if self._asked[index] is done:
            self._asked[index] = None


def readiness_of(instances: Sequence[object]) -> Readiness | None:
    """What a version's readiness asks: those of ``instances`` that check (None if none does)."""
    checked = [instance for instance in instances if getattr(instance, "checks_readiness", False)]
    return Readiness(cast(list[Checked], checked)) if checked else None
