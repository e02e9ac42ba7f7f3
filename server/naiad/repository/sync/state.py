"""What a destination remembers between syncs: which source object became which blob.

``.state/index.json`` maps each key of the last listing to ``(token, size, digest)``; an object whose
token (ETag, generation, mtime) and size are unchanged is the same content, so its blob is reused and
nothing is downloaded.  Every blob committed during a sync is also appended to ``.state/journal.jsonl``
at once, so a sync killed halfway resumes from where it stopped instead of from zero.  The journal is
folded into the index when a sync completes.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Entry:
    token: str
    size: int
    digest: str


class SourceIndex:
    """The (source, key) -> blob memory of one destination; safe to record into from many threads."""

    def __init__(self, state_dir: Path, source: str) -> None:
        self.source = source
        self._index_path = state_dir / "index.json"
        self._journal_path = state_dir / "journal.jsonl"
        self._entries: dict[str, Entry] = {}
        self._lock = threading.Lock()
        self._load()
        self._journal = self._journal_path.open("a", encoding="utf-8")

    def _load(self) -> None:
        try:
            document: Any = json.loads(self._index_path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            document = {}
        if isinstance(document, dict) and document.get("source") == self.source:
            for key, (token, size, digest) in document.get("entries", {}).items():
                self._entries[key] = Entry(token, size, digest)
        try:
            lines = self._journal_path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # the last line of a killed sync may be cut short
            if record.get("source") == self.source:
                self._entries[record["key"]] = Entry(record["token"], record["size"], record["digest"])

    def lookup(self, key: str, token: str, size: int) -> str | None:
        """The digest of ``key`` if it was seen with this token and size."""
        entry = self._entries.get(key)
        if entry is None or entry.token != token or entry.size != size:
            return None
        return entry.digest

    def record(self, key: str, token: str, size: int, digest: str) -> None:
        """Remember a committed blob, durably enough to survive the process being killed."""
        line = json.dumps({"source": self.source, "key": key, "token": token, "size": size, "digest": digest})
        with self._lock:
            self._entries[key] = Entry(token, size, digest)
            self._journal.write(line + "\n")
            self._journal.flush()

    def save(self, keys: set[str]) -> None:
        """Write the index for exactly ``keys`` (the last listing) and empty the journal."""
        with self._lock:
            entries = {k: [e.token, e.size, e.digest] for k, e in self._entries.items() if k in keys}
            temp = self._index_path.with_suffix(".tmp")
            temp.write_text(json.dumps({"source": self.source, "entries": entries}), encoding="utf-8")
            os.replace(temp, self._index_path)
            self._journal.truncate(0)

    def close(self) -> None:
        self._journal.close()
