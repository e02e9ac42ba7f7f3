"""How much resident memory the server and its model processes hold, for "memory a load added".

A Python model with worker processes lives in child interpreters, so the server's own RSS would miss
it: the footprint is the server's resident set plus its child processes', read from ``/proc`` (0 where
there is no ``/proc``).  Loads that run at the same time share the growth between them, so the figure
per version is exact only for a load that ran alone.

An instance that runs in a process of its own (a Python model's model process, which may be started by
a template process rather than by the server) says how much it holds itself: :func:`version_bytes`
then counts those processes' resident sets, exactly, whatever else loads at the same time.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class OwnMemory(Protocol):
    """An instance whose memory is a process of its own."""

    def resident_bytes(self) -> int: ...


class GpuMemory:
    """Memory used on each GPU this process may use (by CUDA index), from NVML (``nvidia-ml-py``).

    A version's GPU footprint is what used memory grew by on each device while it loaded, so, as for
    in-process models on the host, loads that run at the same time share their growth.
    """

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self._nvml = nvml
        self._handles = handles

    @classmethod
    def open(cls) -> GpuMemory | None:
        """The visible devices (``CUDA_VISIBLE_DEVICES`` indices, else all), or ``None`` without NVML."""
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # no module, driver or device: no GPU footprint is measured
            return None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and all(entry.strip().isdigit() for entry in visible.split(",")):
            handles = [handles[int(e)] for e in visible.split(",") if int(e) < len(handles)]
        return cls(pynvml, handles) if handles else None

    def used(self) -> tuple[int, ...]:
        """Bytes used on each device now (0 where NVML does not answer)."""
        readings = []
        for handle in self._handles:
            try:
                readings.append(int(self._nvml.nvmlDeviceGetMemoryInfo(handle).used))
            except Exception:
                readings.append(0)
        return tuple(readings)

    def used_share(self, device: int) -> float | None:
        """The share of device ``device``'s memory in use now (``None`` where NVML does not answer)."""
        if not 0 <= device < len(self._handles):
            return None
        try:
            info = self._nvml.nvmlDeviceGetMemoryInfo(self._handles[device])
            return int(info.used) / int(info.total) if info.total else None
        except Exception:
            return None


def gpu_growth(before: tuple[int, ...], after: tuple[int, ...]) -> tuple[int, ...]:
    """What used memory grew by on each device (never negative)."""
    return tuple(max(0, a - b) for a, b in zip(after, before, strict=True))


class OverlappingLoads:
    """How many loads ran at the same time as each one, to share out what memory grew by meanwhile.

    Growth read around one load also holds what every load beside it allocated: charging it all to
    each (as before) once measured a weightless ONNX model at 546 MiB during a startup of 200 loads,
    more than a whole memory budget.  Each load is charged its share instead: the growth divided by
    the number of loads that overlapped it, itself included; exact for a load that ran alone, a
    fair estimate otherwise (loads run on several threads of the load pool).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens = itertools.count()
        self._overlaps: dict[int, int] = {}

    def begin(self) -> int:
        """A load starts: its token for :meth:`end`."""
        with self._lock:
            token = next(self._tokens)
            for other in self._overlaps:
                self._overlaps[other] += 1
            self._overlaps[token] = len(self._overlaps) + 1
            return token

    def end(self, token: int) -> int:
        """The load ended: how many loads (itself included) ran while it did."""
        with self._lock:
            return self._overlaps.pop(token, 1)


def version_bytes(instances: Iterable[object], growth: int) -> int:
    """A loaded version's footprint: its instances' own processes' resident bytes when they run in
    processes of their own, else ``growth`` (what the server and its children grew by while it loaded)."""
    owned = [instance.resident_bytes() for instance in instances if isinstance(instance, OwnMemory)]
    return sum(owned) if owned else max(0, growth)


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int:
    """Resident bytes of this process and of its direct children.

    Read around every load, on a load thread, while the event loop serves other models: plain
    ``os`` calls over ``/proc`` (a server has dozens of threads, each with a ``children`` file), not
    ``pathlib`` globbing, which held the GIL for about 2.6 ms a reading with 80 threads."""
    own = os.getpid()
    total = _rss(own)
    try:
        tasks = os.listdir(f"/proc/{own}/task")
    except OSError:
        return total
    for task in tasks:
        try:
            with open(f"/proc/{own}/task/{task}/children", "rb") as file:
                children = file.read().split()
        except OSError:
            continue
        total += sum(_rss(int(pid)) for pid in children)
    return total


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as file:
            fields = file.read().split()
    except OSError:
        return 0
    return int(fields[1]) * _PAGE
