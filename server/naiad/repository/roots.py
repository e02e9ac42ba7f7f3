"""The places ``--model-repository`` names: a local folder, or a bucket mirrored into a local cache.

A cloud repository is mirrored with the sync engine into ``<cache>/<hash of the URI>/``: files are
fetched in parallel, each stored under its content hash and remembered by ETag/generation, so an
unchanged object is never fetched again, and a model is read only from a complete snapshot (all its
files arrived and were checked).  Snapshots still in use by loaded versions are never collected.

Local folders are resolved on every refresh, so a repository that is itself a synced ``current``
link is read through the snapshot it pointed at when the model was loaded, never half of two.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Protocol

from naiad.repository.sources.uri import is_remote
from naiad.repository.sync.engine import SyncOptions, sync

#: Snapshots a cloud cache keeps besides those in use.
_KEEP = 2


class RepositoryRoot(Protocol):
    """One ``--model-repository`` entry."""

    spec: str

    def refresh(self, in_use: set[Path]) -> Path | None:
        """Bring the local view up to date (blocking); the folder to scan, or None if there is none."""
        ...

    def path(self) -> Path | None:
        """The folder of the last refresh (cheap; no network)."""
        ...


class LocalRoot:
    def __init__(self, spec: str) -> None:
        self.spec = spec
        self._path = Path(spec).expanduser()

    def refresh(self, in_use: set[Path]) -> Path | None:
        return self.path()

    def path(self) -> Path | None:
        return self._path.resolve()


class CloudRoot:
    """``s3://`` or ``gs://``, synced into a cache folder on every refresh."""

    def __init__(self, spec: str, cache_dir: Path, parallel: int = 16) -> None:
        self.spec = spec
        self.cache = cache_dir / hashlib.sha256(spec.encode()).hexdigest()[:16]
        self.parallel = parallel
        self._path: Path | None = None

    def refresh(self, in_use: set[Path]) -> Path | None:
        """Sync (raises :class:`~naiad.repository.sync.engine.SyncError`); the current snapshot."""
        snapshots = self.cache / "snapshots"
        protect = {p.relative_to(snapshots).parts[0] for p in in_use if p.is_relative_to(snapshots)}
        options = SyncOptions(keep=_KEEP, parallel=self.parallel, wait=True, protect=protect, strict=False)
        result = sync(self.spec, self.cache, options)
        self._path = result.snapshot_path
        return self._path

    def path(self) -> Path | None:
        return self._path


def open_root(spec: str, cache_dir: Path) -> RepositoryRoot:
    return CloudRoot(spec, cache_dir) if is_remote(spec) else LocalRoot(spec)
