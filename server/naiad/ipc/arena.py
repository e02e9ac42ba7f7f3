"""A shared-memory arena: one ``memfd`` mapped by two processes, written by one and read by the other.

The writer allocates blocks in ring order and frees them in any order: the ring's free space is what
lies between the newest block's end and the oldest live block, so allocation and release cost a few
Python operations, whatever the number of blocks in flight.  A block that cannot fit (the ring is full
of live blocks, or the tensor is larger than the arena) gets ``None``: the caller sends it inline.

The engine's response arenas are also written from model instances' threads (outputs placed where
their response goes, :class:`naiad.ipc.tensors.OutputPlacer`), so allocating and freeing take a lock;
and by model processes, into blocks reserved for them in a second ring of their own (see
:class:`Arena`).

An arena is created by the engine with ``memfd_create``: it has no name under ``/dev/shm``, so a
process killed at any moment leaves nothing behind; its memory goes with the last descriptor.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from naiad.core.request import Tensor

#: Blocks start on cache-line boundaries (numpy and the backends like aligned data).
ALIGN = 64


def create(name: str, size: int) -> int:
    """A new anonymous shared-memory file of ``size`` bytes (its pages are allocated when touched)."""
    fd = os.memfd_create(name, 0)
    os.ftruncate(fd, size)
    return fd


class _Ring:
    """Blocks of ``[start, end)`` allocated in ring order and freed in any order (the caller locks)."""

    __slots__ = ("_end", "_head", "_live", "_order", "_start", "_tail")

    def __init__(self, start: int, end: int) -> None:
        self._start = start
        self._end = end
        self._live: dict[int, int] = {}  # offset -> end
        self._order: deque[int] = deque()  # live offsets, oldest first
        self._head = start  # start of the oldest live block
        self._tail = start  # end of the newest block

    def allocate(self, size: int) -> int | None:
        if not self._live:
            self._head = self._tail = self._start
        head, tail = self._head, self._tail
        if tail >= head:
            if tail + size <= self._end:
                offset = tail
            elif self._start + size < head:
                offset = self._start  # wrap: [tail, end) stays unused until the head passes it
            else:
                return None
        elif tail + size < head:
            offset = tail
        else:
            return None
        self._tail = offset + size
        self._live[offset] = offset + size
        self._order.append(offset)
        return offset

    def free(self, offset: int) -> None:
        if self._live.pop(offset, None) is None:
            return
        order = self._order
        while order and order[0] not in self._live:
            order.popleft()
        self._head = order[0] if order else self._tail

    def __len__(self) -> int:
        return len(self._live)


class Arena:
    """``size`` bytes of the memfd ``fd``, mapped writable or read-only.

    The writer allocates in one ring, or in two: the last ``lasting`` bytes are a ring of their own
    for blocks that live much longer than the others (an output's block reserved when its execution
    is sent, see :meth:`reserve`); in a shared ring such a block would hold back the reuse of every
    block allocated after it, however soon those were freed.
    """

    def __init__(self, fd: int, size: int, *, writable: bool, lasting: int = 0) -> None:
        self.size = size
        self._map = mmap.mmap(fd, size, prot=mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0))
        self.view = memoryview(self._map)
        self.writable = writable
        #: The mapping's address: an array whose data lies in [base, base + size) is in this arena.
        self.base = int(np.frombuffer(self._map, np.uint8, 1).ctypes.data)
        self._split = size - lasting
        self._ring = _Ring(0, self._split)
        self._lasting = _Ring(self._split, size) if lasting else None
        self._lock = threading.Lock()

    # ---- writer side ------------------------------------------------------------------------------

    def allocate(self, nbytes: int) -> int | None:
        """The offset of a new block of at least ``nbytes``, or ``None`` when none fits now."""
        size = max(ALIGN, (nbytes + ALIGN - 1) & ~(ALIGN - 1))
        with self._lock:
            return self._ring.allocate(size)

    def reserve(self, nbytes: int) -> int | None:
        """As :meth:`allocate`, in the ring for long-lived blocks; ``None`` also when there is none."""
        ring = self._lasting
        if ring is None:
            return None
        size = max(ALIGN, (nbytes + ALIGN - 1) & ~(ALIGN - 1))
        with self._lock:
            return ring.allocate(size)

    def free(self, offset: int) -> None:
        """Give a block back (any order); unknown offsets are ignored (a block is freed once)."""
        with self._lock:
            if offset < self._split:
                self._ring.free(offset)
            elif self._lasting is not None:
                self._lasting.free(offset)

    @property
    def in_use(self) -> int:
        return len(self._ring) + (len(self._lasting) if self._lasting is not None else 0)

    def write(self, offset: int, data: Any) -> None:
        """Copy a buffer (bytes, memoryview, contiguous array) into the block at ``offset``."""
        if isinstance(data, np.ndarray):  # by bytes: a buffer of bfloat16 has no struct format to cast
            source = memoryview(data.reshape(-1).view(np.uint8))  # type: ignore[arg-type, unused-ignore]
        else:
            source = memoryview(data).cast("B")
        self.view[offset : offset + source.nbytes] = source

    # ---- both sides -------------------------------------------------------------------------------

    def array(self, offset: int, nbytes: int, dtype: Any) -> np.ndarray[Any, Any]:
        """A flat numpy view of a block (read-only on the reading side)."""
        itemsize = np.dtype(dtype).itemsize
        return np.frombuffer(self.view, dtype=dtype, count=nbytes // itemsize, offset=offset)

    def contains(self, array: np.ndarray[Any, Any]) -> int | None:
        """The offset of ``array``'s data in this arena when it is a contiguous view into it."""
        if not array.flags.c_contiguous or array.dtype.hasobject:
            return None
        address = int(array.ctypes.data) - self.base
        if 0 <= address and address + array.nbytes <= self.size:
            return address
        return None

    def holds(self, array: np.ndarray[Any, Any]) -> bool:
        """Whether any of ``array``'s data lies in this arena (a view of a block, sliced or not)."""
        if not array.size:
            return False
        low = high = int(array.__array_interface__["data"][0])
        # its lowest and highest byte (by hand: NumPy 1.26, which the pins allow, has no byte_bounds here)
        for length, stride in zip(array.shape, array.strides, strict=True):
            reach = (length - 1) * stride
            low, high = (low + reach, high) if reach < 0 else (low, high + reach)
        return low < self.base + self.size and high + array.itemsize > self.base

    def close(self) -> None:
        try:
            self.view.release()
            self._map.close()
        except BufferError:  # a view still exported (a response being encoded): the GC unmaps it later
            pass


class SharedArenas:
    """The frontend workers' request arenas, as the engine lends them to its model processes (and their
    response arenas, which a model process maps shared and writable: it writes an output straight
    into the block the engine reserved for it, see ``naiad.ipc.tensors.OutputPlacer.reserve``).

    A model process maps each by its path under ``/proc`` (the engine holds the memfd open while the
    arena lives), opened read-only and mapped copy-on-write, so a large input crosses to it with no
    copy in the engine, whatever its size (the engine's per-request cost must not grow with
    tensors), and an output a model returns from its inputs comes back the same way.  A model
    process could read every request in an arena it maps; it runs as the server's user, which can
    read the engine's memory anyway, and what it writes there stays its own.  Keys are never reused,
    so a restarted worker's new arena is never mistaken for the one it replaced.  A process the
    kernel made non-dumpable (it runs a binary with file capabilities, or changed its credentials)
    lets no other process open its descriptors: it lends nothing, and its model processes get copies
    as before.
    """

    def __init__(self) -> None:
        self.lending = _dumpable()
        self._next = 1
        #: By key: the arena, its path for other processes, its descriptor, whether model processes
        #: map it shared and writable (a response arena) rather than copy-on-write.
        self._arenas: dict[int, tuple[Arena, str, int, bool]] = {}
        #: By key: where each lies in this process, ``(start, end)`` (see ``shm.locate``).  Replaced
        #: whole on each change, never changed in place: model instances' threads iterate it.
        self.spans: dict[int, tuple[int, int]] = {}

    def add(self, arena: Arena, fd: int, *, shared: bool = False) -> int:
        """Lend ``arena`` (mapped from the memfd ``fd``, which now belongs to this table); its key.
        ``shared``: model processes map it shared and writable."""
        key = self._next
        self._next += 1
        self._arenas[key] = (arena, f"/proc/{os.getpid()}/fd/{fd}", fd, shared)
        if self.lending:
            self.spans = {**self.spans, key: (arena.base, arena.base + arena.size)}
        return key

    def remove(self, key: int) -> None:
        """Stop lending arena ``key`` (its worker ended) and close its descriptor."""
        self.spans = {k: span for k, span in self.spans.items() if k != key}
        entry = self._arenas.pop(key, None)
        if entry is not None:
            os.close(entry[2])

    def describe(self, key: int) -> tuple[str, int, bool]:
        """What a model process maps arena ``key`` by: its path, its size, and whether shared."""
        arena, path, _, shared = self._arenas[key]
        return path, arena.size, shared

    def tensor(
        self, name: str, datatype: str, key: int, offset: int, shape: tuple[int, ...], dtype: Any
    ) -> LentTensor | None:
        """A tensor at ``offset`` in arena ``key``, a read-only view; ``None`` once it is not lent."""
        entry = self._arenas.get(key)
        if entry is None:
            return None
        data = np.ndarray(shape, dtype, entry[0].view, offset)
        return LentTensor(name, datatype, data, {}, (data, key, offset))

    def __contains__(self, key: int) -> bool:
        return key in self._arenas


@dataclass(slots=True)
class LentTensor(Tensor):
    """A tensor made where it lies in an arena lent to model processes, which knows where:
    ``lent`` is ``(its array, the arena's key, the offset)`` (see :func:`lent_at`).

    Made by the engine for a frontend worker's large inputs (they lie in its request arena) and for
    a model process's outputs that lie in a lent arena (an input returned, or an output written
    where its response goes), so that sending one on (to a model process, or back to the worker)
    names its place without looking its address up: numpy's ``ctypes.data`` or
    ``__array_interface__`` costs about as much as the rest of such a tensor's way, and the two
    look-ups of an identity's tensor were 18% of the engine's CPU per request to a model process
    (``benchmarks/scaling``, forty-fifth session)."""

    lent: tuple[np.ndarray[Any, Any], int, int] | None = None


def lent_at(tensor: Tensor) -> tuple[int, int] | None:
    """Where ``tensor``'s data lies in a lent arena, ``(key, offset)``, if it was made there and still
    holds that array (``Tensor.data`` can be assigned); ``None``: look for it by its address."""
    if type(tensor) is LentTensor:
        lent = tensor.lent
        if lent is not None and lent[0] is tensor.data:
            return lent[1], lent[2]
    return None


def _dumpable() -> bool:
    """Whether processes of the same user may open this process's ``/proc/<pid>/fd`` entries."""
    import ctypes

    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)) == 1
    except (OSError, AttributeError):  # no prctl (not Linux): nothing is lent
        return False


_PR_GET_DUMPABLE = 3
