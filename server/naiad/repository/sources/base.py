"""What the repository needs from a place that holds model files: list them, and read one.

A source is a flat list of objects under a prefix (S3, GCS, or a local folder walked as one), each with
a ``token`` that changes whenever its content may have changed: the ETag for S3, the generation for
GCS, size and modification time for a file.  The sync engine keys its cache on ``(key, token, size)``,
so an unchanged object is never read twice.

Errors say which of the few things went wrong that an operator acts on differently: the credentials
are refused, the bucket or prefix does not exist, or an object changed or vanished while it was read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

#: Receives the bytes of an object, in order.
Sink = Callable[[bytes], None]


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One object: ``key`` is relative to the source's prefix and ``/``-separated.

    A key ending in ``/`` is a folder marker (how buckets hold an empty folder, such as an ensemble's
    version folder); it has no content to read.
    """

    key: str
    size: int
    token: str


class SourceError(Exception):
    """A source failed; ``kind`` names the failure for the sync summary and its exit status."""

    kind = "source"


class CredentialsError(SourceError):
    kind = "credentials"


class LocationNotFound(SourceError):
    kind = "not_found"


class ObjectChanged(SourceError):
    """The object vanished or was rewritten after it was listed: the listing is no longer the truth."""

    kind = "changed"


class ObjectSource(Protocol):
    """A bucket prefix or a folder, read-only."""

    uri: str

    def list(self) -> Iterator[ObjectInfo]:
        """Every object under the prefix, folder markers included."""
        ...

    def read(self, info: ObjectInfo, sink: Sink, start: int = 0, end: int | None = None) -> None:
        """Feed bytes ``[start, end)`` of the object as listed in ``info`` to ``sink``.

        Raises :class:`ObjectChanged` if the object is gone or is no longer the one listed.
        """
        ...

    def close(self) -> None:
        """Release connections."""
        ...


def safe_key(key: str) -> bool:
    """Keys become paths: refuse any that could climb out of the destination."""
    path = key[:-1] if key.endswith("/") else key
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))
