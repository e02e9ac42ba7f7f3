"""Content-addressed blobs: ``DEST/.objects/sha256/<2 hex>/<64 hex>``, each stored once.

A download is written to ``.objects/tmp/`` and renamed into place only once its hash is known, so a
blob under its name is always complete and correct, whatever killed the process before.  Blobs are
made read-only: snapshots hard-link them, and a write through any link would change every snapshot.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

_READ_CHUNK = 4 << 20


def hash_file(path: Path) -> str:
    """The SHA-256 of a file, hex."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class ObjectStore:
    """The blob folder of one sync destination."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tmp = root / "tmp"
        self.tmp.mkdir(parents=True, exist_ok=True)

    def path(self, digest: str) -> Path:
        return self.root / "sha256" / digest[:2] / digest

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def new_temp(self) -> Path:
        """An empty file for one download, removed by :meth:`commit` or :meth:`discard_temps`."""
        fd, name = tempfile.mkstemp(dir=self.tmp, prefix="dl-")
        os.close(fd)
        return Path(name)

    def commit(self, temp: Path, digest: str) -> bool:
        """Move a finished download into place; False if the blob was already there (temp dropped)."""
        target = self.path(digest)
        if target.is_file():
            temp.unlink(missing_ok=True)
            return False
        target.parent.mkdir(parents=True, exist_ok=True)
        temp.chmod(0o444)
        os.replace(temp, target)
        return True

    def remove(self, digest: str) -> None:
        self.path(digest).unlink(missing_ok=True)

    def discard_temps(self) -> None:
        """Drop downloads a killed sync left behind (their objects will be fetched again)."""
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir(parents=True, exist_ok=True)

    def unreferenced(self) -> Iterator[tuple[Path, int]]:
        """Blobs no snapshot links to (link count 1: only the store holds them), with their sizes."""
        base = self.root / "sha256"
        if not base.is_dir():
            return
        for shard in base.iterdir():
            for blob in shard.iterdir():
                stat = blob.stat()
                if stat.st_nlink <= 1:
                    yield blob, stat.st_size
