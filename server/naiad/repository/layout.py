"""The Triton repository layout: ``<repo>/<model>/[config.pbtxt]`` and numeric ``<version>/`` folders.

Only the file system is read here; nothing is loaded.  Model names become path components, so a name
is accepted only if it is a single, ordinary path segment.
"""

from __future__ import annotations

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


def scan_repositories(roots: list[Path]) -> dict[str, ModelLocation]:
    """Every model folder across the repositories, by name.

    Hidden folders and files are skipped.  A name found in two repositories is kept with its
    duplicates listed, so the manager can mark it UNAVAILABLE as Triton does.
    """
    found: dict[str, ModelLocation] = {}
    for root in roots:
        if not root.is_dir():
            continue
        for entry in sorted(root.iterdir()):
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            previous = found.get(entry.name)
            if previous is None:
                found[entry.name] = ModelLocation(entry.name, entry)
            else:
                found[entry.name] = ModelLocation(entry.name, previous.path, (*previous.duplicates, entry))
    return found


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
