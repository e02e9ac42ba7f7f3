"""The Triton repository layout: ``<repo>/<model>/[config.pbtxt]`` and numeric ``<version>/`` folders.

Only the file system is read here; nothing is loaded.  Model names become path components, so a name
is accepted only if it is a single, ordinary path segment.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from naiad.core.errors import InvalidArgumentError

log = logging.getLogger("naiad.repository")

CONFIG_FILE = "config.pbtxt"
#: Where ``--model-config-name`` looks for a model's other configurations (``configs/<name>.pbtxt``).
CONFIGS_FOLDER = "configs"
#: Folders a model's folder may hold beside its versions: warm-up data, initial states, custom configs.
_BESIDE_VERSIONS = frozenset(("warmup", "initial_state", CONFIGS_FOLDER))


def check_model_name(name: str) -> str:
    """Reject names that could escape the repository (``..``, ``/``, NUL) or are empty.

    A backslash is an ordinary character in a POSIX path (Triton 2.51 loads ``model\\test``), so it is
    left to the backends: the Python backend refuses it in a stub name, as Triton's does."""
    if not name or name in (".", "..") or "/" in name or names_a_key(name) or len(name) > 255:
        raise InvalidArgumentError(f"invalid model name '{name}'")
    return name


#: What C's ``isspace`` calls white space, which Triton trims from a name it is asked to load.
_SPACE = " \t\n\v\f\r"


def check_load_name(name: str) -> None:
    """Refuse a name a load request gives that is empty (or only white space), or that would reach
    outside the repository (``..``, or holding a ``/``, once trimmed), in current Triton's words
    (INVALID_ARG; Triton 2.51 and Naiad before answered "failed to poll from model repository",
    a 500 for the client's mistake).  Other names are looked for, and a missing one fails to poll."""
    trimmed = name.strip(_SPACE)
    if not trimmed:
        raise InvalidArgumentError("Model name cannot be empty. Please enter a valid name to deploy.")
    if trimmed == ".." or "/" in trimmed:
        raise InvalidArgumentError(
            f"invalid model name '{name}', model name must not contain path traversal characters"
        )
    if names_a_key(name):
        raise InvalidArgumentError(f"invalid model name '{name}'")


#: What separates a model's name from its repository in the key of a namespaced model: a NUL, which
#: no model name contains (:func:`check_model_name`), so no request can name a key by accident.
_MARK = "\x00"


def names_a_key(name: str) -> bool:
    """Whether a name holds the mark of a key: no model is called that (:func:`check_model_name`), and
    a client's name taken as a key would name another model (``alpha\\x00`` is ``alpha`` in no
    namespace), loaded again under a key nothing unloads."""
    return _MARK in name


def model_key(name: str, namespace: str = "") -> str:
    """The key a model is known by in the server: its name, or under ``--model-namespacing`` its
    name in its repository (``namespace``: the ``--model-repository`` it was found in), so that
    models of the same name in different repositories are different models (Triton's identifier)."""
    return f"{name}{_MARK}{namespace}" if namespace else name


def split_key(key: str) -> tuple[str, str]:
    """``(name, namespace)`` of a :func:`model_key` (namespace "" when the model has none)."""
    name, _, namespace = key.partition(_MARK)
    return name, namespace


def describe(key: str) -> str:
    """A key as logs show it: the name, with its repository in brackets when it has one."""
    name, namespace = split_key(key)
    return f"{name} ({namespace})" if namespace else name


@dataclass(frozen=True, slots=True)
class ModelLocation:
    """Where a model lives; ``duplicates`` lists other repositories holding the same name, and
    ``namespace`` is the repository's under ``--model-namespacing`` (where names may repeat)."""

    name: str
    path: Path
    duplicates: tuple[Path, ...] = ()
    namespace: str = ""

    @property
    def key(self) -> str:
        return model_key(self.name, self.namespace)


@dataclass(frozen=True, slots=True)
class Root:
    """A repository as scanned: its folder, and its namespace (``--model-namespacing``) or ""."""

    path: Path
    namespace: str = ""


def locate(roots: list[Root], key: str) -> ModelLocation | None:
    """Where the model ``key`` names lives, reading only ``<root>/<name>`` in each repository (a stat
    each; one repository when the key has a namespace).

    A request for a model that loads on demand and a load of one model need only its folder; listing
    every repository for them cost milliseconds of the event loop per call with hundreds of models."""
    name, namespace = split_key(key)
    if not name or name.startswith(".") or "/" in name:  # hidden, or not one segment
        return None
    if namespace:
        for root in roots:
            if root.namespace == namespace and (folder := root.path / name).is_dir():
                return ModelLocation(name, folder, namespace=namespace)
        return None
    found = [folder for root in roots if (folder := root.path / name).is_dir()]
    if not found:
        return None
    return ModelLocation(name, found[0], tuple(found[1:]))


def namespaces_of(roots: list[Root], name: str) -> list[str]:
    """The keys of the models named ``name`` in namespaced repositories (one per repository that
    holds a folder of that name), in the repositories' order."""
    if not name or name.startswith(".") or "/" in name or _MARK in name:
        return []
    return [model_key(name, root.namespace) for root in roots if (root.path / name).is_dir()]


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

    def scan(self, roots: list[Root]) -> dict[str, ModelLocation]:
        """Every model by key.  Hidden folders and files are skipped.  A name found in two
        repositories is kept with its duplicates listed, so the manager can mark it UNAVAILABLE as
        Triton does, unless the repositories are namespaces (then each is a model of its own)."""
        paths = {root.path for root in roots}
        if len(self._listings) > len(paths):  # a synced repository's earlier snapshots: forget them
            for stale in self._listings.keys() - paths:
                del self._listings[stale]
        found: dict[str, ModelLocation] = {}
        for root in roots:
            for location in self._list(root.path):
                if root.namespace:
                    placed = ModelLocation(location.name, location.path, namespace=root.namespace)
                    found[placed.key] = placed
                    continue
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
    """Numeric version folders, ascending.  As Triton: a name with a leading zero (``01``, not
    ``0``) or that is no number is ignored with a warning, unless it is one of Triton's own folders
    beside the versions (warm-up data, initial states, custom configs)."""
    versions: list[int] = []
    if not model_dir.is_dir():
        return versions
    for entry in model_dir.iterdir():
        name = entry.name
        if not entry.is_dir() or name in _BESIDE_VERSIONS:
            continue
        if len(name) > 1 and name.startswith("0"):
            log.warning(
                "ignore version directory '%s' which contains leading zeros in its directory name", name
            )
        elif name.isdigit() and name.isascii():
            versions.append(int(name))
        else:
            log.warning("ignore version directory '%s' which fails to convert to integral number", name)
    return sorted(versions)
