"""The template process that model processes are forked from (``naiad.backends.python.zygote``),
driven directly as the engine drives it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from naiad.backends.python.zygote import Zygote


def _gone(pid: int) -> bool:
    """Whether ``pid`` ended and was reaped (by the template, its parent)."""
    return not Path(f"/proc/{pid}").exists()


def test_a_model_process_reaped_after_its_engine_end_closed_leaves_the_template_serving() -> None:
    """A killed engine's status pipes lose their reader before the template reads its control socket's
    end, and a model process that saw the engine go may be reaped first: its status, written to a pipe
    no one reads, must not end the template, which would then never remove the engine's files."""
    zygote = Zygote()
    try:
        first = zygote.start()
        os.close(first.sentinel)  # the engine's end of its status pipe, as when the engine is killed
        os.close(first.log)
        first.conn.close()  # the idle model process reads its end and leaves
        deadline = time.monotonic() + 10
        while not _gone(first.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _gone(first.pid)
        time.sleep(0.2)  # (the template's turn: the write to the closed pipe came with the reaping)
        assert zygote._process is not None
        template = zygote._process.pid
        assert zygote._process.poll() is None, "the template ended"
        second = zygote.start()  # the same template forks the next one
        assert zygote._process.pid == template
        second.conn.close()
        assert second.wait(10) == 0  # and reports its status as before
        second.close()
    finally:
        zygote.close()
