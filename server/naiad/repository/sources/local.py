"""A local folder as an object source (``naiad repo sync ./models DEST``, and tests)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from naiad.repository.sources.base import LocationNotFound, ObjectChanged, ObjectInfo, Sink

_CHUNK = 1 << 20


class LocalSource:
    """Files under ``root``; the token is size and modification time, as ``rsync`` decides."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.uri = str(root)

    def list(self) -> Iterator[ObjectInfo]:
        if not self.root.is_dir():
            raise LocationNotFound(f"{self.root} is not a folder")
        for folder, dirs, files in os.walk(self.root, followlinks=True):
            dirs.sort()
            base = Path(folder)
            if not dirs and not files and base != self.root:
                yield ObjectInfo(base.relative_to(self.root).as_posix() + "/", 0, "folder")
            for name in sorted(files):
                path = base / name
                stat = path.stat()
                key = path.relative_to(self.root).as_posix()
                yield ObjectInfo(key, stat.st_size, f"{stat.st_mtime_ns}-{stat.st_size}")

    def read(self, info: ObjectInfo, sink: Sink, start: int = 0, end: int | None = None) -> None:
        path = self.root / info.key
        try:
            with path.open("rb") as file:
                stat = os.fstat(file.fileno())
                if f"{stat.st_mtime_ns}-{stat.st_size}" != info.token:
                    raise ObjectChanged(f"{path} changed after it was listed")
                file.seek(start)
                remaining = (info.size if end is None else end) - start
                while remaining > 0:
                    chunk = file.read(min(_CHUNK, remaining))
                    if not chunk:
                        raise ObjectChanged(f"{path} is shorter than when it was listed")
                    sink(chunk)
                    remaining -= len(chunk)
        except FileNotFoundError:
            raise ObjectChanged(f"{path} vanished after it was listed") from None

    def close(self) -> None:
        return None
