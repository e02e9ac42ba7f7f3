"""``naiad repo sync SOURCE DEST``: mirror a model repository into a content-addressed folder.

DEST ends up as::

    DEST/.objects/sha256/ab/ab12...   every distinct file content, once, read-only
    DEST/snapshots/<id>/...           one immutable tree of hard links per distinct repository state
    DEST/current -> snapshots/<id>    switched by one rename once a snapshot is complete
    DEST/.state/                      index (source key -> blob), resume journal, history, lock

The steps are list, download what is new (in parallel; large objects in ranges), validate the layout,
build the snapshot, switch ``current``, and collect old snapshots.  Any failure before the switch
leaves ``current`` as it was, and what was already downloaded stays for the next attempt.  Only one
sync runs on a destination at a time (an ``flock`` on ``.state/lock``, released by the kernel even
when the process is killed).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from naiad.repository.sources.base import ObjectInfo, ObjectSource, SourceError, safe_key
from naiad.repository.sources.uri import open_source
from naiad.repository.sync.layout_check import ModelSummary, check_layout
from naiad.repository.sync.progress import Progress
from naiad.repository.sync.snapshot import CURRENT, ManifestEntry, Snapshots, snapshot_id
from naiad.repository.sync.state import SourceIndex
from naiad.repository.sync.store import ObjectStore, hash_file


class SyncError(Exception):
    """A sync that did not switch ``current``; ``kind`` says why (see :data:`EXIT_STATUS`)."""

    def __init__(self, message: str, kind: str = "error", details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.details = details


#: Exit status of ``naiad repo sync`` per failure kind, so a Job's result says what to fix.
EXIT_STATUS = {"error": 1, "credentials": 3, "not_found": 4, "changed": 5, "validation": 6, "busy": 7}


@dataclass(slots=True)
class SyncOptions:
    """``keep``: snapshots kept by GC (0: keep all); ``verify``: re-hash reused blobs; ``parallel``:
    concurrent downloads; ``part_size``: objects above it are fetched as parallel ranges;
    ``wait``: wait for a concurrent sync instead of failing; ``protect``: snapshot ids GC must keep;
    ``strict``: a layout error fails the sync (the server turns it off: it loads the valid models and
    reports the others UNAVAILABLE)."""

    keep: int = 3
    verify: bool = False
    parallel: int = 16
    part_size: int = 64 << 20
    wait: bool = False
    protect: set[str] = field(default_factory=set)
    strict: bool = True


@dataclass(slots=True)
class SyncResult:
    """What the JSON summary reports (and what the operator copies into status)."""

    source: str
    destination: Path
    snapshot: str
    previous: str | None
    objects_listed: int = 0
    objects_copied: int = 0
    objects_reused: int = 0
    bytes_listed: int = 0
    bytes_copied: int = 0
    duration: float = 0.0
    models: list[ModelSummary] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    removed_snapshots: list[str] = field(default_factory=list)
    removed_objects: int = 0
    freed_bytes: int = 0

    @property
    def snapshot_path(self) -> Path:
        return self.destination / "snapshots" / self.snapshot

    def to_json(self) -> dict[str, Any]:
        changed = self.previous != self.snapshot
        return {
            "result": "Succeeded" if changed or self.objects_copied else "NoChange",
            "source": self.source,
            "destination": str(self.destination),
            "snapshot": {
                "id": f"sha256:{self.snapshot}",
                "path": str(self.snapshot_path),
                "previous": f"sha256:{self.previous}" if self.previous else None,
                "switched": changed,
            },
            "objects": {
                "listed": self.objects_listed,
                "copied": self.objects_copied,
                "reused": self.objects_reused,
            },
            "bytes": {"listed": self.bytes_listed, "copied": self.bytes_copied},
            "duration_seconds": round(self.duration, 3),
            "models": [m.to_json() for m in self.models],
            "warnings": self.warnings,
            "gc": {
                "removed_snapshots": [f"sha256:{s}" for s in self.removed_snapshots],
                "removed_objects": self.removed_objects,
                "freed_bytes": self.freed_bytes,
            },
        }


def sync(
    location: str, dest: Path, options: SyncOptions | None = None, progress: Progress | None = None
) -> SyncResult:
    """Sync ``location`` (``s3://``, ``gs://`` or a folder) into ``dest``; raises :class:`SyncError`."""
    options = options or SyncOptions()
    progress = progress or Progress(enabled=False)
    dest = dest.absolute()
    try:
        return _locked_sync(location, dest, options, progress)
    except SourceError as exc:
        raise SyncError(str(exc), exc.kind) from exc
    except OSError as exc:  # the destination: disk full, permissions, a key both file and folder
        raise SyncError(f"{dest}: {exc}") from exc
    finally:
        progress.finish()


def _locked_sync(location: str, dest: Path, options: SyncOptions, progress: Progress) -> SyncResult:
    state_dir = dest / ".state"
    state_dir.mkdir(parents=True, exist_ok=True)
    with _Lock(state_dir / "lock", options.wait):
        try:
            source = open_source(location, options.parallel)
        except ValueError as exc:  # not a location this tool understands
            raise SyncError(str(exc)) from exc
        try:
            return _Sync(source, dest, state_dir, options, progress).run()
        finally:
            source.close()


class _Aborted(Exception):
    """Stops a download in progress once another one has failed the sync."""


class _Lock:
    """An exclusive ``flock`` on the destination."""

    def __init__(self, path: Path, block: bool) -> None:
        self.path, self.block = path, block
        self._fd = -1

    def __enter__(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | (0 if self.block else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(self._fd)
            raise SyncError(f"another sync is running on {self.path.parent.parent}", "busy") from None

    def __exit__(self, *_: object) -> None:
        os.close(self._fd)


class _Sync:
    def __init__(
        self, source: ObjectSource, dest: Path, state_dir: Path, options: SyncOptions, progress: Progress
    ) -> None:
        self.source = source
        self.dest = dest
        self.options = options
        self.progress = progress
        self.store = ObjectStore(dest / ".objects")
        self.index = SourceIndex(state_dir, source.uri)
        self.snapshots = Snapshots(dest, state_dir)
        self.started = time.monotonic()

    def run(self) -> SyncResult:
        try:
            return self._run()
        finally:
            self.index.close()

    def _run(self) -> SyncResult:
        self.store.discard_temps()
        listing = self._list()
        result = SyncResult(self.source.uri, self.dest, "", self.snapshots.current())
        digests = self._fetch([info for info in listing if not info.key.endswith("/")], result)
        self.index.save({info.key for info in listing})
        entries = [
            ManifestEntry(info.key, "" if info.key.endswith("/") else digests[info.key], info.size)
            for info in listing
        ]
        self._validate(entries, result)
        self.progress.phase("building the snapshot")
        result.snapshot = snapshot_id(entries)
        self.snapshots.materialize(result.snapshot, entries, self.store)
        if result.previous != result.snapshot:
            self.snapshots.switch(result.snapshot)
        self._collect(result)
        result.duration = time.monotonic() - self.started
        return result

    def _list(self) -> list[ObjectInfo]:
        self.progress.phase(f"listing {self.source.uri}")
        listing = list(self.source.list())
        if not listing:
            raise SyncError(f"{self.source.uri}: no objects found (wrong bucket or prefix?)", "not_found")
        unsafe = [info.key for info in listing if not safe_key(info.key)]
        if unsafe:
            raise SyncError(f"{self.source.uri}: object keys that are not safe paths: {unsafe[:5]}")
        return listing

    def _fetch(self, files: list[ObjectInfo], result: SyncResult) -> dict[str, str]:
        """Reuse what is stored, download the rest; every file's digest by key."""
        result.objects_listed = len(files)
        result.bytes_listed = sum(info.size for info in files)
        digests, missing, corrupted = self._reusable(files)
        result.objects_reused = len(files) - len(missing)
        self.progress.plan(len(missing), sum(info.size for info in missing))
        digests.update(self._download(missing))
        if corrupted:
            self.snapshots.repair(corrupted, self.store)
        result.objects_copied = len(missing)
        result.bytes_copied = sum(info.size for info in missing)
        return digests

    def _validate(self, entries: list[ManifestEntry], result: SyncResult) -> None:
        result.models, result.warnings = check_layout(entries, lambda d: self.store.path(d).read_bytes())
        problems = [error for model in result.models for error in model.errors]
        if self.options.strict and (problems or not result.models):
            detail = "; ".join(problems) or "no model folder"
            raise SyncError(
                f"{self.source.uri} is not a valid Triton repository: {detail}", "validation", result
            )

    def _reusable(self, files: list[ObjectInfo]) -> tuple[dict[str, str], list[ObjectInfo], dict[int, str]]:
        """Digests of objects already stored, the objects to download, and (``verify``) the inodes of
        blobs found corrupted, with the digest they should have had."""
        digests: dict[str, str] = {}
        corrupted: dict[int, str] = {}
        candidates: list[tuple[ObjectInfo, str]] = []
        missing: list[ObjectInfo] = []
        for info in files:
            digest = self.index.lookup(info.key, info.token, info.size)
            if digest is not None and self.store.has(digest):
                candidates.append((info, digest))
            else:
                missing.append(info)
        if self.options.verify and candidates:
            self.progress.phase(f"verifying {len(candidates)} stored objects")
            with ThreadPoolExecutor(self.options.parallel) as pool:
                actual = list(pool.map(lambda c: hash_file(self.store.path(c[1])), candidates))
            for (info, digest), found in zip(candidates, actual, strict=True):
                if found != digest:
                    blob = self.store.path(digest)
                    if blob.exists():
                        corrupted[blob.stat().st_ino] = digest
                        self.store.remove(digest)
                    missing.append(info)
            candidates = [c for c, found in zip(candidates, actual, strict=True) if found == c[1]]
        for info, digest in candidates:
            digests[info.key] = digest
        return digests, missing, corrupted

    def _download(self, objects: list[ObjectInfo]) -> dict[str, str]:
        """Fetch ``objects`` into the store; their digests by key.  Fails fast on the first error."""
        if not objects:
            return {}
        digests: dict[str, str] = {}
        failed = threading.Event()
        part = self.options.part_size
        with ThreadPoolExecutor(self.options.parallel, thread_name_prefix="naiad-sync") as pool:
            futures: list[Future[None]] = []
            for info in sorted(objects, key=lambda i: -i.size):
                if info.size > part:
                    ranged = _Ranged(self, info, digests, failed)
                    futures += [
                        pool.submit(ranged.fetch, s, min(s + part, info.size))
                        for s in range(0, info.size, part)
                    ]
                else:
                    futures.append(pool.submit(self._fetch_object, info, digests, failed))
            done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            errors = [f.exception() for f in done if f.exception() is not None]
            if errors:
                failed.set()
                for other in pending:
                    other.cancel()
                raise errors[0]  # type: ignore[misc]
        return digests

    def _fetch_object(self, info: ObjectInfo, digests: dict[str, str], failed: threading.Event) -> None:
        if failed.is_set():
            return
        temp = self.store.new_temp()
        digest = hashlib.sha256()
        advance = self.progress.advance
        with temp.open("wb") as file:

            def sink(chunk: bytes) -> None:
                if failed.is_set():
                    raise _Aborted
                file.write(chunk)
                digest.update(chunk)
                advance(len(chunk), False)

            self.source.read(info, sink)
        self._commit(info, temp, digest.hexdigest(), digests)

    def _commit(self, info: ObjectInfo, temp: Path, digest: str, digests: dict[str, str]) -> None:
        self.store.commit(temp, digest)
        self.index.record(info.key, info.token, info.size, digest)
        digests[info.key] = digest
        self.progress.advance(0, True)

    def _collect(self, result: SyncResult) -> None:
        result.removed_snapshots = self.snapshots.collect(self.options.keep, self.options.protect)
        if not result.removed_snapshots:
            return
        for blob, size in self.store.unreferenced():
            blob.unlink(missing_ok=True)
            result.removed_objects += 1
            result.freed_bytes += size


class _Ranged:
    """One large object fetched as parallel byte ranges into one file, hashed once all arrived."""

    def __init__(
        self, sync: _Sync, info: ObjectInfo, digests: dict[str, str], failed: threading.Event
    ) -> None:
        self.sync, self.info, self.digests, self.failed = sync, info, digests, failed
        self.temp = sync.store.new_temp()
        os.truncate(self.temp, info.size)
        self.remaining = -(-info.size // sync.options.part_size)
        self._lock = threading.Lock()

    def fetch(self, start: int, end: int) -> None:
        if self.failed.is_set():
            return
        advance = self.sync.progress.advance
        with self.temp.open("r+b") as file:
            file.seek(start)

            def sink(chunk: bytes) -> None:
                if self.failed.is_set():
                    raise _Aborted
                file.write(chunk)
                advance(len(chunk), False)

            self.sync.source.read(self.info, sink, start, end)
        with self._lock:
            self.remaining -= 1
            last = self.remaining == 0
        if last:
            self.sync._commit(self.info, self.temp, hash_file(self.temp), self.digests)


def current_snapshot(dest: Path) -> Path | None:
    """The folder ``DEST/current`` points at, resolved, if any."""
    link = dest / CURRENT
    return link.resolve() if link.is_symlink() else None
