"""Tensors between the server and a Python model's worker process, through shared memory.

Each direction of an instance has one region: a file on a memory filesystem (``/dev/shm``), mapped
by both processes.  The writer lays tensors out in it and sends only their placement (a few dozen
bytes per tensor) through the pipe, so tensor data crosses the process boundary with one copy.  A
region is reused for every execution and replaced by a larger one when a batch does not fit; its
file is unlinked as soon as both sides have mapped it, so nothing is left behind if a process dies.
Only a process killed in the moment between creating a region and its peer mapping it leaves a file:
files are named after the process that created them, and :func:`remove_orphans` deletes those whose
process is gone.

BYTES tensors (numpy object arrays) have no flat layout and travel pickled in the message instead,
and so do small tensors (up to :data:`INLINE` bytes), as their bytes: the few bytes most requests
carry (a ranking model's features, a tokenizer's ids) cost less to pickle with the message than to lay
out in a region and view there, on both sides of every execution (`benchmarks/scaling`: 2 us less of
the engine's CPU per ``add_sub`` request in a model process, 30 -> 28 us); an execution whose tensors
are all small needs no region at all.

A large tensor that already lies in memory both processes map crosses with no copy at all: a frontend
worker's request arena, which the engine lends its model processes (see
:class:`naiad.ipc.arena.SharedArenas`; mapped copy-on-write, so that a model may change its inputs in
place, as in Triton, without the worker's memory changing: :class:`Written`), or, back from a model
that returns an input or a view of one, the same arena.  Its placement names the arena by key
(:data:`Spans`) instead of a region.  And the engine reads a model process's outputs where they lie
(:meth:`Region.leased`): the region they are in is not given to another execution while the engine's
views of it live.
"""

from __future__ import annotations

import functools
import math
import mmap
import os
import sys
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import numpy as np

from naiad.core.request import Tensor
from naiad.ipc.arena import LentTensor, lent_at

Array = np.ndarray[Any, Any]

#: Where one tensor is: ``(name, datatype, shape, dtype, offset, None)`` in a region,
#: ``(name, datatype, shape, dtype, offset, key)`` in the shared arena ``key``,
#: ``(name, datatype, shape, dtype, -1, data)`` for a small one whose bytes travel in the message, or
#: ``(name, datatype, shape, None, -1, array)`` for an array that travels in the message (BYTES,
#: and empty arrays, which need no room).
Placement = tuple[str, str, tuple[int, ...], Any, int, Array | bytes | int | None]
#: The shared arenas a process maps, by key: where each lies in its address space, ``(start, end)``.
Spans = dict[int, tuple[int, int]]
#: Where a tensor already lies in a shared arena, ``(key, offset)``; ``None`` when it does not.
Shared = tuple[int, int] | None

_ALIGN = 64
_MIN_SIZE = 1 << 20
_FOLDER = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
_PREFIX = "naiad-"


class Region:
    """A shared, file-backed memory mapping; ``path`` names it for the other process.

    ``readonly`` is a read-only view of the same memory: arrays made over it are read-only from the
    start, which costs less per input than making a writable view and clearing its flag.
    """

    __slots__ = ("buffer", "path", "readonly", "size")

    def __init__(self, path: str, size: int, buffer: mmap.mmap) -> None:
        self.path = path
        self.size = size
        self.buffer = buffer
        self.readonly = memoryview(buffer).toreadonly()

    def leased(self) -> bool:
        """Whether an array made over this region (:func:`view`) still lives: the region then must
        not be written again.  Such an array holds the mapping, as does every view made of it, so
        the mapping's references are counted against those of a region no array reads (its own:
        ``buffer``, and ``readonly``'s; measured once, as interpreters count a call's differently)."""
        return self._references() > _UNLEASED

    def _references(self) -> int:
        return sys.getrefcount(self.buffer)

    @classmethod
    def create(cls, needed: int) -> Region:
        """A new region of at least ``needed`` bytes (a power of two, 1 MiB or more)."""
        size = max(_MIN_SIZE, 1 << max(0, needed - 1).bit_length())
        fd, path = _new_file()
        try:
            os.ftruncate(fd, size)
            buffer = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(path, size, buffer)

    @classmethod
    def attach(cls, path: str, size: int, *, private: bool = False) -> Region:
        """Map the region another process created.  ``private``: a shared arena, opened read-only and
        mapped copy-on-write: what this process writes there stays its own (:class:`Written`)."""
        fd = os.open(path, os.O_RDONLY if private else os.O_RDWR)
        try:
            if private:
                buffer = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            else:
                buffer = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(path, size, buffer)

    def span(self) -> tuple[int, int]:
        """Where this mapping lies in this process's address space: ``(start, end)``."""
        start = address(np.frombuffer(self.readonly, np.uint8, 1))
        return start, start + self.size

    def unlink(self) -> None:
        """Remove the file; the mappings stay valid until both processes drop them."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


#: The references to a region's mapping while no array reads it.
_UNLEASED = Region("", mmap.PAGESIZE, mmap.mmap(-1, mmap.PAGESIZE))._references()


def _folder() -> str:
    """Where regions are made: ``/dev/shm``, else the system's temporary folder.

    ``tempfile`` is imported only for that fallback: with ``shutil``, ``random`` and the compression
    modules it brings, it is about half a MiB that every model process, forked from a template that
    imports this module, would hold (see ``zygote._settle``)."""
    if _FOLDER is not None:
        return _FOLDER
    import tempfile

    return tempfile.gettempdir()


def _new_file() -> tuple[int, str]:
    """A new, empty file named after this process (as ``tempfile.mkstemp`` makes one: created
    exclusively, readable by this user only); its descriptor and path."""
    folder = _folder()
    while True:
        path = os.path.join(folder, f"{_PREFIX}{os.getpid()}-{os.urandom(8).hex()}.shm")
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), path
        except FileExistsError:
            continue


def remove_orphans(folder: str | None = None, ended: Collection[int] = ()) -> list[str]:
    """Delete the region files whose creating process no longer runs; the paths deleted.

    ``folder`` defaults to where regions are made (the system's temporary folder without
    ``/dev/shm``).  A file whose process is alive, or whose name carries no process ID, is kept;
    one of a process in ``ended`` is not: the caller saw it end, and its ID may already be another
    process's (IDs are reused, and a busy machine goes round 32,768 of them in minutes).
    """
    folder = folder or _folder()
    removed: list[str] = []
    for entry in os.scandir(folder):
        name = entry.name
        if not (name.startswith(_PREFIX) and name.endswith(".shm")):
            continue
        pid = name[len(_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or (int(pid) not in ended and running(int(pid))):
            continue
        try:
            os.unlink(entry.path)
        except FileNotFoundError:  # another server swept it first
            continue
        removed.append(entry.path)
    return removed


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which has ended but is not reaped yet, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def layout_size(tensors: Iterable[Tensor], shared: Sequence[Shared] | None = None) -> int:
    """Bytes a region needs to hold ``tensors`` (object arrays travel in the message instead, and
    those ``shared`` locates in a shared arena by reference)."""
    needed = 0
    for index, tensor in enumerate(tensors):
        array = tensor.data
        nbytes = array.nbytes
        if nbytes > INLINE and array.dtype.kind != "O" and (shared is None or shared[index] is None):
            needed += (nbytes + _ALIGN - 1) & ~(_ALIGN - 1)
    return needed


def address(array: Array) -> int:
    """Where ``array``'s data starts in this process's memory."""
    return int(array.__array_interface__["data"][0])


def locate(spans: Spans, tensors: Sequence[Tensor]) -> list[Shared] | None:
    """Which of ``tensors`` lie whole in one of the shared arenas ``spans`` (each ``(key, offset)``,
    else ``None``); ``None`` when none does.  Only tensors larger than :data:`_SMALL` are looked
    for: a smaller one costs less to copy than to find (a microsecond for its address)."""
    if not spans:
        return None
    found: list[Shared] | None = None
    for index, tensor in enumerate(tensors):
        array = tensor.data
        if array.nbytes <= _SMALL or array.dtype.kind == "O" or not array.flags.c_contiguous:
            continue
        lent = lent_at(tensor)  # (made where it lies: no look-up)
        if lent is not None and lent[0] in spans:
            if found is None:
                found = [None] * len(tensors)
            found[index] = lent
            continue
        start = address(array)
        end = start + array.nbytes
        for key, (low, high) in spans.items():
            if low <= start and end <= high:
                if found is None:
                    found = [None] * len(tensors)
                found[index] = (key, start - low)
                break
    return found


#: Arrays past :data:`INLINE` and up to this size are copied into a region as bytes: a slice
#: assignment costs a fraction of making an array over the region and ``copyto`` (a microsecond per
#: tensor, per execution); a larger one is copied once, without the temporary bytes.
_SMALL = 1 << 16
#: Arrays up to this size travel in the message as their bytes (what a frontend worker's message
#: carries inside it too, :data:`naiad.ipc.tensors.INLINE_MAX`), not in a region.
INLINE = 4096


def place(
    region: Region | None, tensors: Iterable[Tensor], shared: Sequence[Shared] | None = None
) -> list[Placement]:
    """Copy ``tensors`` into ``region`` (those ``shared`` locates in a shared arena are placed where
    they lie, not copied; small ones go as their bytes, in the placement); their placements, in
    order."""
    placements: list[Placement] = []
    offset = 0
    for index, tensor in enumerate(tensors):
        array = tensor.data
        name = tensor.name
        datatype = tensor.datatype
        dtype = array.dtype
        size = array.nbytes
        if shared is not None and (where := shared[index]) is not None:
            placements.append((name, datatype, array.shape, _portable(dtype), where[1], where[0]))
            continue
        if dtype.kind == "O" or not size:
            # (a shallow copy: the message is pickled when it is sent, after later executions may
            # have run and changed an array their model keeps)
            placements.append((name, datatype, array.shape, None, -1, array.copy() if size else array))
            continue
        if size <= INLINE:
            placements.append((name, datatype, array.shape, _portable(dtype), -1, array.tobytes()))
            continue
        assert region is not None
        if size <= _SMALL:
            region.buffer[offset : offset + size] = array.tobytes()
        else:
            target: Array = np.ndarray(array.shape, dtype, region.buffer, offset)
            np.copyto(target, array, casting="no")
        placements.append((name, datatype, array.shape, _portable(dtype), offset, None))
        offset += (size + _ALIGN - 1) & ~(_ALIGN - 1)
    return placements


def in_message(
    tensors: Iterable[Tensor], spans: Spans | None = None, lent: list[Shared] | None = None
) -> list[Placement] | None:
    """The placements of ``tensors`` when every one travels in the message (most executions: a few
    small tensors) or, given the shared arenas' ``spans``, was made where it lies in one of them (a
    frontend worker's large inputs, :class:`~naiad.ipc.arena.LentTensor`: placed by reference, each
    ``(key, offset)`` added to ``lent``), made in one pass, with no region, no copy and no look-up of
    an address; ``None`` when one is neither (then :func:`locate`, :func:`layout_size` and
    :func:`place`)."""
    placements: list[Placement] = []
    for tensor in tensors:
        array = tensor.data
        dtype = array.dtype
        if spans is not None and type(tensor) is LentTensor:
            where = tensor.lent
            if where is not None and where[0] is array and where[1] in spans:
                placements.append(
                    (tensor.name, tensor.datatype, array.shape, _portable(dtype), where[2], where[1])
                )
                if lent is not None:
                    lent.append((where[1], where[2]))
                continue
        size = array.nbytes
        if size > INLINE:
            return None
        name, datatype = tensor.name, tensor.datatype
        if dtype.kind == "O" or not size:  # (as ``place`` does)
            placements.append((name, datatype, array.shape, None, -1, array.copy() if size else array))
        else:
            placements.append((name, datatype, array.shape, _portable(dtype), -1, array.tobytes()))
    return placements


@functools.cache
def _portable(dtype: np.dtype[Any]) -> Any:
    """``dtype`` as its type string when that names it exactly (``'<f4'``: a few bytes to pickle
    instead of a numpy object to rebuild on each message), else the dtype itself (bfloat16...)."""
    return dtype.str if np.dtype(dtype.str) == dtype else dtype


def view(
    region: Region | None,
    placement: Placement,
    arenas: dict[int, Region] | None = None,
    *,
    writable: bool = False,
) -> Array:
    """The array a placement describes: a view of ``region`` or of the shared arena it names in
    ``arenas`` (no copy), or the array or bytes it carries.  Read-only unless ``writable``: a model
    process's inputs, which a model may change in place as in Triton, in its own region, in its
    copy-on-write mapping of a shared arena (:class:`Written` undoes what it wrote there), or in a
    copy of the bytes that came with the message."""
    _, _, shape, dtype, offset, inline = placement
    if inline is None:
        assert region is not None
        return np.ndarray(shape, dtype, region.buffer if writable else region.readonly, offset)
    if isinstance(inline, bytes):
        # (one call, not ``frombuffer`` and ``reshape``: a third less, per tensor of every execution)
        return np.ndarray(shape, dtype, bytearray(inline) if writable else inline)
    if isinstance(inline, int):
        assert arenas is not None
        arena = arenas[inline]
        return np.ndarray(shape, dtype, arena.buffer if writable else arena.readonly, offset)
    if writable:  # (an array unpickled from the message's bytes may be read-only: a copy of its own)
        return inline if inline.flags.writeable else inline.copy()
    inline.flags.writeable = False
    return inline


def extent(placement: Placement) -> int:
    """The bytes a placed tensor takes (one in a region or a shared arena)."""
    _, _, shape, dtype, _, _ = placement
    return int(np.dtype(dtype).itemsize * math.prod(shape))


#: A page map entry's last byte (bits 56-63, little-endian) by kind: 1 for a page this process wrote.
_PAGE_KINDS = bytes(1 if byte & 0xA0 == 0x80 else 0 for byte in range(256))
_OWN_PAGE = 1


class Written:
    """The pages of shared arenas this process has written, through their copy-on-write mappings.

    A model may change an input in place.  In a shared arena mapped privately the pages it writes
    become this process's own copies (the worker's memory never changes), but they would hide what
    the worker writes there later: so after each execution the pages of its inputs that this process
    wrote are dropped (``MADV_DONTNEED``: the next read maps the worker's page again), and an output
    that lies on such a page is not sent by reference.  Which pages were written is read from
    ``/proc/self/pagemap`` (present and not file-backed: a private copy); where that cannot be read,
    every page of an input counts as written.
    """

    def __init__(self) -> None:
        self._pagemap: int | None = None
        self._readable = True
        #: What each page range's check found, kept while nothing writes (see :meth:`hold`).
        self._held: dict[tuple[int, int], bool] | None = None

    def hold(self) -> None:
        """Nothing writes the arenas until :meth:`release`: an execution whose model returned, its
        outputs checked and then its inputs undone.  A range checked twice meanwhile (an identity's
        output is its input) is read from the page map once: each read walks every page of a large
        tensor, and the two were a third of such an execution's cost in its model process."""
        self._held = {}

    def release(self) -> None:
        self._held = None

    def any(self, address: int, nbytes: int) -> bool:
        """Whether this process wrote a page of ``[address, address + nbytes)`` (True if unknown)."""
        if nbytes <= 0:
            return False
        first, last = address // mmap.PAGESIZE, (address + nbytes - 1) // mmap.PAGESIZE
        held = self._held
        if held is not None:
            found = held.get((first, last))
            if found is None:
                found = held[(first, last)] = self._any(first, last - first + 1)
            return found
        return self._any(first, last - first + 1)

    def _any(self, first: int, count: int) -> bool:
        entries = self._entries(first, count)
        if entries is None:
            return True
        # each entry's last byte: bit 63 (present) set and bit 61 (file page or shared) clear is a
        # page of this process's own, one it wrote; bytes' C methods, not numpy's per-call cost
        return _OWN_PAGE in entries[7::8].translate(_PAGE_KINDS)

    def undo(self, arena: Region, base: int, offset: int, nbytes: int) -> None:
        """Drop the pages of ``[offset, offset + nbytes)`` in ``arena`` (mapped at ``base``) this
        process wrote, if any."""
        if not self.any(base + offset, nbytes):
            return
        low = offset - offset % mmap.PAGESIZE
        high = min(arena.size, -(-(offset + nbytes) // mmap.PAGESIZE) * mmap.PAGESIZE)
        arena.buffer.madvise(mmap.MADV_DONTNEED, low, high - low)

    def _entries(self, first: int, count: int) -> bytes | None:
        if self._pagemap is None and self._readable:
            try:  # (opened here, in the model process: "self" is fixed when the file is opened)
                self._pagemap = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._readable = False
        if self._pagemap is None:
            return None
        try:
            data = os.pread(self._pagemap, count * 8, first * 8)
        except OSError:
            return None
        return data if len(data) == count * 8 else None


def copy(region: Region | None, placement: Placement) -> Array:
    """The array a placement describes as an array of its own, writable: a copy out of ``region``
    (which its writer reuses), or the array or bytes that came with the message (the reader's own
    already)."""
    _, _, shape, dtype, offset, inline = placement
    if inline is not None:
        assert not isinstance(inline, int)  # (an array in a shared arena is never copied out)
        if isinstance(inline, bytes):
            return np.ndarray(shape, dtype, bytearray(inline))
        return inline
    assert region is not None
    return np.ndarray(shape, dtype, region.buffer, offset).copy()
