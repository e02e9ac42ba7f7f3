"""Immutable snapshots of hard links, and the atomic ``current`` pointer.

A snapshot is named by the hash of its manifest (every path with its blob digest), so the same content
always gives the same snapshot and a sync that changed nothing switches nothing.  It is built under a
temporary name and renamed into place, and ``current`` is a relative symlink replaced by ``rename``:
a reader following ``current`` sees the old tree or the new one, never a mix.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from naiad.repository.sync.store import ObjectStore

SNAPSHOTS = "snapshots"
CURRENT = "current"


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    """A file (``digest`` set) or an empty folder (``path`` ending in ``/``, no digest)."""

    path: str
    digest: str
    size: int


def snapshot_id(entries: list[ManifestEntry]) -> str:
    """The hex SHA-256 of the sorted manifest."""
    digest = hashlib.sha256()
    for entry in sorted(entries, key=lambda e: e.path):
        digest.update(f"{entry.path}\0{entry.digest}\0{entry.size}\n".encode())
    return digest.hexdigest()


class Snapshots:
    """The ``snapshots/`` folder, the ``current`` link and the switch history of one destination."""

    def __init__(self, dest: Path, state_dir: Path) -> None:
        self.dest = dest
        self.root = dest / SNAPSHOTS
        self.root.mkdir(parents=True, exist_ok=True)
        self._history = state_dir / "history.json"

    def current(self) -> str | None:
        """The id ``current`` points at, if any."""
        link = self.dest / CURRENT
        try:
            return Path(os.readlink(link)).name
        except (FileNotFoundError, OSError):
            return None

    def materialize(self, sid: str, entries: list[ManifestEntry], store: ObjectStore) -> Path:
        """``snapshots/<sid>/``, built from hard links unless it exists already."""
        target = self.root / sid
        if target.is_dir():
            return target
        building = self.root / f".building-{sid}-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        for entry in entries:
            path = building / entry.path
            if not entry.digest:
                path.mkdir(parents=True, exist_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            os.link(store.path(entry.digest), path)
        building.mkdir(parents=True, exist_ok=True)
        os.replace(building, target)
        return target

    def repair(self, corrupted: dict[int, str], store: ObjectStore) -> None:
        """Re-link every snapshot file that still shares an inode with a corrupted blob to the blob
        downloaded again under the same digest (one atomic rename per file)."""
        for path in self.root.rglob("*"):
            if path.is_symlink() or not path.is_file():
                continue
            digest = corrupted.get(path.stat().st_ino)
            if digest is not None and store.has(digest):
                temp = path.with_name(f".repair.{path.name}")
                temp.unlink(missing_ok=True)
                os.link(store.path(digest), temp)
                os.replace(temp, path)

    def switch(self, sid: str) -> None:
        """Point ``current`` at ``snapshots/<sid>`` in one rename, and remember the switch."""
        temp = self.dest / f".{CURRENT}.{os.getpid()}"
        temp.unlink(missing_ok=True)
        temp.symlink_to(Path(SNAPSHOTS) / sid)
        os.replace(temp, self.dest / CURRENT)
        history = [h for h in self.history() if h["id"] != sid]
        history.append({"id": sid, "switched_at": time.time()})
        temp_history = self._history.with_suffix(".tmp")
        temp_history.write_text(json.dumps(history), encoding="utf-8")
        os.replace(temp_history, self._history)

    def history(self) -> list[dict[str, object]]:
        """Snapshots in the order ``current`` last pointed at them, oldest first."""
        try:
            document = json.loads(self._history.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return []
        return [h for h in document if isinstance(h, dict) and isinstance(h.get("id"), str)]

    def collect(self, keep: int, protect: set[str]) -> list[str]:
        """Delete all but the ``keep`` most recent snapshots (never ``current`` or ``protect``).

        Leftovers of killed builds are removed too.  Returns the ids removed.
        """
        recent = [str(h["id"]) for h in self.history()][-keep:] if keep > 0 else []
        keepers = set(recent) | protect
        current = self.current()
        if current is not None:
            keepers.add(current)
        removed: list[str] = []
        for entry in sorted(self.root.iterdir()):
            if entry.name in keepers:
                continue
            if entry.name.startswith(".building-") or keep > 0:
                shutil.rmtree(entry, ignore_errors=True)
                if not entry.name.startswith("."):
                    removed.append(entry.name)
        return removed
