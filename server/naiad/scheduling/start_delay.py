"""Triton's scheduler start delays: a scheduler holds its first executions until requests queue up.

Triton reads two environment variables when it creates a model's scheduler, in its release builds:
``TRITONSERVER_DELAY_SCHEDULER=N`` holds the dynamic batcher (and the default scheduler, which is
one) until N requests wait in its queue, and a sequence batcher until N requests wait in its slots;
``TRITONSERVER_BACKLOG_DELAY_SCHEDULER=M`` also holds a sequence batcher until M requests wait in
its backlog (sequences that have no slot yet).  Once the count is reached the scheduler runs as
usual for the rest of its life.

NVIDIA's own tests of batching (``qa/L0_batcher``, ``L0_sequence_batcher``,
``L0_sequence_corrid_batcher``...) set them so that the batches they expect form whatever the
machine's speed: requests sent one after another all wait, then go as the batcher groups them.  Naiad
reads them as Triton does so that those tests, and users' tests written like them, run unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from naiad.core.atoi import atoi

DELAY_VARIABLE = "TRITONSERVER_DELAY_SCHEDULER"
BACKLOG_DELAY_VARIABLE = "TRITONSERVER_BACKLOG_DELAY_SCHEDULER"


@dataclass(frozen=True, slots=True)
class StartDelay:
    """How many requests a new scheduler waits for before its first execution (0: none)."""

    #: Requests queued (dynamic batcher) or waiting in slots (sequence batcher).
    queued: int = 0
    #: Requests waiting in a sequence batcher's backlog, on top of ``queued``.
    backlog: int = 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> StartDelay:
        """The delays the environment asks for, read as Triton reads them (C's ``atoi``)."""
        return cls(
            queued=max(0, atoi(environ.get(DELAY_VARIABLE, ""))),
            backlog=max(0, atoi(environ.get(BACKLOG_DELAY_VARIABLE, ""))),
        )

    def __bool__(self) -> bool:
        return bool(self.queued or self.backlog)


NO_DELAY = StartDelay()
