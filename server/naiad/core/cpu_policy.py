"""The Linux scheduling policy of the server's threads: ``SCHED_BATCH`` unless ``--cpu-policy normal``.

Why: a request crosses threads that wake one another.  In ``grpc.aio`` each completion of a call (the
new call, its message, the answer sent, the close) is read by grpc's completion-queue poller thread,
which wakes the event loop's thread with a write; an ONNX Runtime request is handed to its instance's
thread and its intra-op pool; a model process's answers come back through a reader.  Under
the default policy (``SCHED_OTHER``) a woken thread preempts the one that woke it, so on a busy core
each hand-off is a context switch, and its cost is paid again for every completion: 12 context switches
per unary gRPC call on a frontend worker's core under load (``benchmarks/scaling``).  A ``SCHED_BATCH``
thread does not preempt on wake-up: the waker finishes what it has (often the next completions too)
and the woken thread runs when the waker blocks or its time slice ends, so hand-offs are batched: 2 to
3.5 context switches per call, and 14-25% more gRPC calls per core.  On an idle core a woken thread
still runs at once, so latency at low load is unchanged (measured at one connection); the threads'
share of the CPU against other processes (their nice value) is unchanged too.  Setting it needs no
privilege.

The policy is set for every thread of the process as it starts serving and is inherited by every
thread and process started afterwards: grpc's threads, model instances' threads, frontend workers and
model processes.  Where the kernel refuses (a seccomp profile that forbids ``sched_setscheduler``, a
system other than Linux) the server says so once and serves under the policy it has.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

#: ``--cpu-policy`` values and the ``os`` constant each stands for (by name: not every system has them).
CPU_POLICIES = {"batch": "SCHED_BATCH", "normal": "SCHED_OTHER"}


def apply_cpu_policy(name: str) -> bool:
    """Give every thread of this process the policy ``name`` (a key of :data:`CPU_POLICIES`); False where
    that was not possible (logged)."""
    policy = getattr(os, CPU_POLICIES[name], None)
    if policy is None or not hasattr(os, "sched_setscheduler"):
        log.warning(
            "--cpu-policy %s: this system has no %s; serving under its default", name, CPU_POLICIES[name]
        )
        return False
    try:
        # sched_setscheduler(2) sets one thread: every thread there is now, then the ones they start
        # inherit it.  A thread that ends between the listing and the call is no longer there to set.
        for task in Path("/proc/self/task").iterdir():
            try:
                os.sched_setscheduler(int(task.name), policy, os.sched_param(0))
            except ProcessLookupError:
                continue
    except OSError as exc:
        log.warning(
            "--cpu-policy %s: the kernel refused %s (%s); serving under its default",
            name,
            CPU_POLICIES[name],
            exc,
        )
        return False
    return True
