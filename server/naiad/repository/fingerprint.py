"""Cheap identities of what is on disk, to tell "changed" from "the same" without reading models.

A file is identified by its path, size and modification time (what ``rsync`` trusts); hard links in a
synced snapshot share their blob's identity, so an unchanged file in a new snapshot is the same file.
POLL compares a model folder's fingerprint across polls; a reload compares each version's fingerprint
(its files, the model-level files and the effective configuration) to keep versions that did not
change loaded.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from naiad.repository.layout import CONFIG_FILE, CONFIGS_FOLDER

#: Folders that are not part of a model: Python writes ``__pycache__`` beside a module it imports (the
#: user's tools, another server; ours compiles models' sources without it), and counting them would
#: make that import a change to the model (POLL reloaded it).
_NOT_MODEL = frozenset({"__pycache__"})


def _files(root: Path) -> list[tuple[str, int, int]]:
    """``(relative path, size, mtime_ns)`` of every file under ``root``, sorted."""
    return _walk(root)[0]


def _walk(root: Path) -> tuple[list[tuple[str, int, int]], int]:
    """:func:`_files`, and the newest status change (``ctime``, ns) of a file or folder under
    ``root``: unlike the modification time, no copy that preserves times (``cp -a``, ``tar``) can
    set it back."""
    found: list[tuple[str, int, int]] = []
    newest = 0
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in _NOT_MODEL)
        base = Path(folder)
        try:
            newest = max(newest, base.stat().st_ctime_ns)
        except FileNotFoundError:
            pass
        for name in files:
            path = base / name
            try:
                stat = path.stat()
            except FileNotFoundError:  # removed while we walked: the next poll sees the new state
                continue
            found.append((path.relative_to(root).as_posix(), stat.st_size, stat.st_mtime_ns))
            newest = max(newest, stat.st_ctime_ns)
        if not dirs and not files:
            found.append((base.relative_to(root).as_posix() + "/", 0, 0))
    return sorted(found), newest


def _digest(items: Iterable[object]) -> str:
    digest = hashlib.sha256()
    for item in items:
        digest.update(repr(item).encode())
    return digest.hexdigest()


def folder_fingerprint(paths: Iterable[Path]) -> str:
    """The state of one or more folders (a model folder, plus its duplicates in other repositories).

    Only what is inside counts, not where: the same model in a new snapshot of a synced repository
    (``current`` switched, files hard-linked) is unchanged."""
    return _digest(_files(path) for path in paths)


def folder_state(paths: Iterable[Path]) -> tuple[str, int]:
    """:func:`folder_fingerprint` and when anything in the folders last changed (``ctime``, ns)."""
    walks = [_walk(path) for path in paths]
    return _digest(files for files, _ in walks), max((newest for _, newest in walks), default=0)


def version_fingerprints(
    model_dir: Path, versions: Iterable[int], config_text: str, base_text: str
) -> tuple[dict[int, str], dict[int, str]]:
    """Per version, from one walk of the folder: its fingerprint (its files, the model-level files
    outside any version folder, and ``config_text``), and its base fingerprint (the same with
    ``base_text``, the configuration without its instance groups, in place of the configuration
    files, which an instance update changes)."""
    files = _files(model_dir)
    shared = [f for f in files if not f[0].split("/", 1)[0].isdigit()]
    unconfigured = [f for f in shared if f[0] != CONFIG_FILE and not f[0].startswith(f"{CONFIGS_FOLDER}/")]
    full: dict[int, str] = {}
    base: dict[int, str] = {}
    for version in versions:
        prefix = f"{version}/"
        own = [f for f in files if f[0].startswith(prefix)]
        full[version] = _digest([config_text, shared, own])
        base[version] = _digest([base_text, unconfigured, own])
    return full, base
