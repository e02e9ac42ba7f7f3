"""The Triton repository layout: ``<repo>/<model>/[config.pbtxt]`` and numeric ``<version>/`` folders.

Only the file system is read here; nothing is loaded.  Model names become path components, so a name
is accepted only if it is a single, ordinary path segment.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from naiad.core.errors import InvalidArgumentError

CONFIG_FILE = "config.pbtxt"


def check_model_name(name: str) -> str:
    """Reject names that could escape the repository (``..``, ``/``, NUL) or are empty.

    A backslash is an ordinary character in a POSIX path (Triton 2.51 loads ``model\\test``), so it is
    left to the backends: the Python backend refuses it in a stub name, as Triton's does."""
    if not name or name in (".", "..") or "/" in name or "\x00" in name or len(name) > 255:
        raise InvalidArgumentError(f"invalid model name '{name}'")
    return name


@dataclass(frozen=True, slots=True)
class ModelLocation:
    """Where a model lives; ``duplicates`` lists other repositories holding the same name."""

    name: str
    path: Path
    duplicates: tuple[Path, ...] = ()


def locate(roots: list[Path], name: str) -> ModelLocation | None:
    """Where ``name`` lives, reading only ``<root>/<name>`` in each repository (a stat each).

    A request for a model that loads on demand and a load of one model need only its folder; listing
    every repository for them cost milliseconds of the event loop per call with hundreds of models."""
    if not name or name.startswith(".") or "/" in name or "\x00" in name:  # hidden, or not one segment
        return None
    found = [folder for root in roots if (folder := root / name).is_dir()]
    if not found:
        return None
    return ModelLocation(name, found[0], tuple(found[1:]))


@dataclass(frozen=True, slots=True)
class _Listing:
    mtime_ns: int
    folders: tuple[ModelLocation, ...]


class RepositoryListing:
    """Every model folder across the repositories, by name; each folder's listing reused while the
    folder itself is unchanged.

    The repository index and ``/metrics`` list the repositories on every call, and the operator reads
    both every second from every pod: relisting 200 model folders took ~0.5 ms of the event loop each
    time.  A listing depends only on the entries of the repository folder, and adding, removing or
    renaming an entry changes that folder's mtime, so a listing is reused while the mtime is the same.
    It is never reused when the mtime is under :attr:`SETTLE_NS` old (a change within the file system's
    timestamp granularity would leave it equal) or when an entry is a symbolic link (what it points to
    can change without touching the folder).
    """

    SETTLE_NS = 2_000_000_000

    def __init__(self) -> None:
        self._listings: dict[Path, _Listing] = {}

    def scan(self, roots: list[Path]) -> dict[str, ModelLocation]:
        """Hidden folders and files are skipped.  A name found in two repositories is kept with its
        duplicates listed, so the manager can mark it UNAVAILABLE as Triton does."""
        if len(self._listings) > len(roots):  # a synced repository's earlier snapshots: forget them
            for stale in self._listings.keys() - set(roots):
                del self._listings[stale]
        found: dict[str, ModelLocation] = {}
        for root in roots:
            for location in self._list(root):
                previous = found.get(location.name)
                if previous is None:
                    found[location.name] = location
                else:
                    duplicates = (*previous.duplicates, location.path)
                    found[location.name] = ModelLocation(location.name, previous.path, duplicates)
        return found

    def _list(self, root: Path) -> tuple[ModelLocation, ...]:
        try:
            mtime_ns = os.stat(root).st_mtime_ns
        except OSError:
            self._listings.pop(root, None)
            return ()
        cached = self._listings.get(root)
        if cached is not None and cached.mtime_ns == mtime_ns:
            return cached.folders
        folders: list[ModelLocation] = []
        linked = False
        try:
            with os.scandir(root) as entries:
                for entry in entries:
                    if entry.name.startswith(".") or not entry.is_dir():
                        continue
                    linked = linked or entry.is_symlink()
                    folders.append(ModelLocation(entry.name, root / entry.name))
        except NotADirectoryError:
            return ()
        listing = tuple(sorted(folders, key=lambda location: location.name))
        if linked or time.time_ns() - mtime_ns < self.SETTLE_NS:
            self._listings.pop(root, None)
        else:
            self._listings[root] = _Listing(mtime_ns, listing)
        return listing


def available_versions(model_dir: Path) -> list[int]:
    """Numeric version folders, ascending.  Names with a leading zero are ignored, as Triton does."""
    versions: list[int] = []
    if not model_dir.is_dir():
        return versions
    for entry in model_dir.iterdir():
        name = entry.name
        if entry.is_dir() and name.isdigit() and name.isascii() and not name.startswith("0"):
            versions.append(int(name))
    return sorted(versions)
