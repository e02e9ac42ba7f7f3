"""The processes a server under test started: its model processes, template and workers are read from
``/proc`` (what is really running, not what the server says it started)."""

from __future__ import annotations

import os
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children of all its threads, recursively), ``pid`` not included;
    a process that ends while it is read is passed over."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                queue += [int(c) for c in Path(f"/proc/{current}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found[1:]


def sockets_of(pid: int) -> set[str]:
    """The inodes of the sockets process ``pid`` holds open (as ``/proc/net/tcp`` names them); none
    once it ended."""
    held = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return held
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            held.add(target[8:-1])
    return held
