"""Client system shared memory: the regions clients register, and bounds-checked access to them.

A client creates a POSIX shared memory object (``shm_open`` key, a file under ``/dev/shm``) and
registers a window of it (offset, byte size) under a region name; requests then name a region, an
offset in it and a byte size instead of carrying tensor bytes.

A region is never mapped into the server.  It is accessed with ``pread``/``pwrite`` on a descriptor
held open since registration, because a mapping turns a client's mistake into the server's crash: a
shared memory object truncated after registration makes any access past its new end a SIGBUS.  With a
descriptor, a read past the end is a short read (an error for that request), an unlinked object keeps
its data until the region is unregistered, and every access is checked against the registered window
first, so nothing outside it is ever read or written.

A region a request in flight reads or writes is held (:meth:`SharedMemoryRegistry.acquire`) until the
request is answered.  Unregistering it meanwhile succeeds, as in Triton: the region stays listed and
usable until the last request holding it ends, and goes then, without a second call (a client that
unregisters everything while a slow request runs must not break that request, nor find the region
gone from under it).

Regions are only touched on the event loop (registration, request decoding, writing outputs), so the
registry needs no lock.  Messages and error codes are Triton's, where Triton has one.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass

from naiad.core.errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnsupportedError,
)

#: Where ``shm_open`` keys live (Linux).
SHM_FOLDER = "/dev/shm"
#: Key prefixes of shared memory the server uses itself: a client must not register them (Triton
#: reserves its Python backend's prefix; Naiad's Python workers name theirs ``naiad-*``).
RESERVED_PREFIXES = ("triton_python_backend_shm_region_", "naiad-")
_SIZE_MAX = 2**64 - 1
_DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."


@dataclass(frozen=True, slots=True)
class RegionStatus:
    """What the status endpoints report for one region."""

    name: str
    key: str
    offset: int
    byte_size: int


class Region:
    """One registered window ``[offset, offset + byte_size)`` of a shared memory object.

    ``users`` counts the requests in flight that read or write the region; ``closing`` is set when it
    is unregistered meanwhile (Triton's "awaiting unregister"): it stays registered, and its
    descriptor open, until the last of them is done, so a descriptor number is never reused under a
    pending write.
    """

    __slots__ = ("_fd", "byte_size", "closing", "key", "name", "offset", "users")

    def __init__(self, name: str, key: str, offset: int, byte_size: int, fd: int) -> None:
        self.name = name
        self.key = key
        self.offset = offset
        self.byte_size = byte_size
        self._fd = fd
        self.users = 0
        self.closing = False

    def check(self, offset: int, byte_size: int) -> None:
        """Raise Triton's error unless ``[offset, offset + byte_size)`` lies inside the region."""
        if offset < 0 or offset >= self.byte_size:
            raise InvalidArgumentError(f"Invalid offset for shared memory region: '{self.name}'")
        if byte_size > _SIZE_MAX - offset:
            raise InvalidArgumentError(
                f"Integer overflow detected: byte_size ({byte_size}) + offset ({offset}) exceeds maximum "
                f"value ({_SIZE_MAX}) for region '{self.name}'"
            )
        if byte_size < 0 or offset + byte_size > self.byte_size:
            raise InvalidArgumentError(
                f"Invalid offset + byte size for shared memory region: '{self.name}'"
            )

    def read(self, offset: int, byte_size: int) -> bytearray:
        """A copy of ``byte_size`` bytes at ``offset`` in the region (bounds checked first)."""
        self.check(offset, byte_size)
        out = bytearray(byte_size)
        view = memoryview(out)
        done = 0
        while done < byte_size:
            count = os.preadv(self._fd, [view[done:]], self.offset + offset + done)
            if count <= 0:
                raise InvalidArgumentError(self._shrunk())
            done += count
        return out

    def write(self, offset: int, data: memoryview) -> None:
        """Write ``data`` at ``offset`` in the region (bounds checked first).

        Refused when the object was truncated below the registered window: writing would grow it
        again behind the client's back.
        """
        size = data.nbytes
        self.check(offset, size)
        if os.fstat(self._fd).st_size < self.offset + self.byte_size:
            raise InvalidArgumentError(self._shrunk())
        data = data.cast("B")
        done = 0
        while done < size:
            done += os.pwrite(self._fd, data[done:], self.offset + offset + done)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _shrunk(self) -> str:
        return (
            f"shared memory region '{self.name}' (key '{self.key}') is smaller than when it was "
            "registered: was the shared memory object truncated?"
        )


def _key_path(name: str, key: str) -> str:
    """``/dev/shm/<key>``, for a key as ``shm_open`` takes it (leading '/'s dropped, no other '/'),
    after Triton's checks of a key (one of only '/'s, one of a reserved prefix), in Triton's words."""
    base = key.lstrip("/")
    if not base:
        raise InvalidArgumentError(f"cannot register shared memory region '{name}' - invalid shm key '{key}'")
    for prefix in RESERVED_PREFIXES:
        if base.startswith(prefix):
            raise InvalidArgumentError(
                f"cannot register shared memory region '{name}' with key '{key}' as the key contains "
                f"the reserved prefix '{prefix}'"
            )
    if base in (".", "..") or "/" in base or "\0" in base or len(base) > 255:
        raise InvalidArgumentError(f"Unable to open shared memory region: '{key}'")
    return os.path.join(SHM_FOLDER, base)


def _open(path: str, key: str) -> int:
    """An open descriptor on the key's object; never follows a link, only opens regular files
    (``O_NONBLOCK``: a FIFO planted under the key must not hang the event loop in ``open``)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
            raise InternalError(f"Unable to open shared memory region: '{key}': {exc.strerror}") from None
        raise InvalidArgumentError(f"Unable to open shared memory region: '{key}'") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InvalidArgumentError(f"Unable to open shared memory region: '{key}'")
    return fd


class SharedMemoryRegistry:
    """The server's registered system shared memory regions, by name.

    ``enabled`` is ``--allow-client-shm``: when false nothing can be registered or unregistered
    (Triton's message; the status stays readable, and empty), so no request can name a region either.
    ``retired``, when set, is told the name of a region unregistered while in use once its last
    request ended and it went (the engine tells its frontend workers' copies then).
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._regions: dict[str, Region] = {}
        self.retired: Callable[[str], None] | None = None

    def require_enabled(self) -> None:
        """Triton's refusal of registration and unregistration when client shared memory is off."""
        if not self.enabled:
            raise UnsupportedError(_DISABLED)

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.require_enabled()
        path = _key_path(name, key)
        if name in self._regions:
            raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
        fd = _open(path, key)
        try:
            size = os.fstat(fd).st_size
            if offset < 0 or byte_size <= 0 or offset + byte_size > size:
                raise InvalidArgumentError(f"failed to register shared memory region '{name}': invalid args")
        except BaseException:
            os.close(fd)
            raise
        self._regions[name] = Region(name, key, offset, byte_size, fd)

    def status(self, name: str = "") -> list[RegionStatus]:
        """Every region, or the one named (NOT_FOUND when it is not registered)."""
        if name:
            return [_status(self.get(name, f"Unable to find system shared memory region: '{name}'"))]
        return [_status(region) for region in self._regions.values()]

    def get(self, name: str, missing: str = "") -> Region:
        region = self._regions.get(name)
        if region is None:
            raise NotFoundError(missing or f"Unable to find shared memory region: '{name}'")
        return region

    def unregister(self, name: str = "") -> None:
        """Forget the named region (all regions for ``""``): at once, or, for one a request in flight
        holds, when the last of them ends.  Unknown names are not an error."""
        self.require_enabled()
        self.forget(name)

    def forget(self, name: str = "") -> None:
        """:meth:`unregister` whatever ``enabled`` says: a frontend worker's copy following the
        engine's registry, the server's shutdown."""
        for each in [name] if name else list(self._regions):
            region = self._regions.get(each)
            if region is None:
                continue
            region.closing = True
            if not region.users:
                del self._regions[each]
                region.close()

    def acquire(self, name: str) -> Region:
        """The named region, kept registered and open until :meth:`release` even if it is
        unregistered meanwhile."""
        region = self.get(name)
        region.users += 1
        return region

    def release(self, region: Region) -> None:
        region.users -= 1
        if region.closing and not region.users:
            region.close()
            if self._regions.get(region.name) is region:
                del self._regions[region.name]
                if self.retired is not None:
                    self.retired(region.name)

    def close(self) -> None:
        self.forget()


def _status(region: Region) -> RegionStatus:
    return RegionStatus(region.name, region.key, region.offset, region.byte_size)
