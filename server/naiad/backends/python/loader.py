"""Importing a model's ``model.py`` as Triton does, but without one process per instance.

Triton runs every instance in its own interpreter, with the version folder appended to ``sys.path``.
Here all instances share one interpreter, so each import of ``model.py`` gets a module name of its own
(module globals are never shared between instances), and the version folder is importable only while
the model loads (import and ``initialize``): modules imported from it are then taken out of
``sys.modules`` again, so that two models that each ship a ``helper.py`` get their own, and nothing of
one model is visible to another.  The one difference a model can notice: a sibling module first
imported inside ``execute`` (rather than at module level or in ``initialize``) is not found.  That is
for models in the engine; a model process serves one model and keeps its folders on ``sys.path`` as
Triton's stub does.

Models' sources are compiled every time they load, never taken from a ``__pycache__``: Python trusts a
cached file when the source's size and modification time in whole seconds match, so a ``model.py``
edited to one of the same size within a second of its last import (a one-character fix, a changed
constant) would run its old code after the reload that was meant to pick it up.  (Triton 2.51's stub
imports through the cache, and its reload serves the old code in that case: checked side by side.)
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import itertools
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import CodeType, ModuleType

from naiad.backends.python import pb_utils

#: The name models import; Triton provides it from its backend folder.
PB_UTILS_MODULE = "triton_python_backend_utils"

# ``sys.path`` and ``sys.modules`` are process-wide: loads that change them must not interleave.
_load_lock = threading.RLock()
_serial = itertools.count(1)


def unique_module_name(model_name: str) -> str:
    """A fresh module name that still says which model it is (it shows in tracebacks)."""
    return f"_naiad_model_{re.sub(r'[^0-9A-Za-z_]', '_', model_name)}_{next(_serial)}"


class _SourceLoader(importlib.machinery.SourceFileLoader):
    """Compiles the source as it is now, and writes no bytecode into the model's folder."""

    def get_code(self, fullname: str) -> CodeType:
        return self.source_to_code(self.get_data(self.path), self.path)


def _finder(folder: str) -> importlib.machinery.FileFinder:
    """Imports from a model's folder, as the default finder makes them but with sources always compiled."""
    return importlib.machinery.FileFinder(
        folder,
        (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES),
        (_SourceLoader, importlib.machinery.SOURCE_SUFFIXES),
        (importlib.machinery.SourcelessFileLoader, importlib.machinery.BYTECODE_SUFFIXES),
    )


def _is_under(module: ModuleType, folder: str) -> bool:
    # Read the module's own namespace, not getattr: a module-level ``__getattr__`` (``torch.classes``
    # has one) answers any name, ``__path__`` included, with objects that are not lists of folders.
    namespace = vars(module)
    package_path = namespace.get("__path__")
    locations = [namespace.get("__file__"), *(package_path if isinstance(package_path, Iterable) else ())]
    for location in locations:
        if isinstance(location, str) and os.path.realpath(location).startswith(folder):
            return True
    return False


@contextmanager
def model_folder_importable(version_dir: Path, keep: str) -> Iterator[None]:
    """Let code run in the block import modules that sit next to ``model.py``.

    Afterwards every module loaded from the folder, except ``keep`` (the model module itself), is
    dropped from ``sys.modules``; the model keeps the references it took.  Unless the folder was
    importable already: a model process keeps its model's folder importable (see ``stub``), and its
    modules then stay, as in Triton.
    """
    entry = str(version_dir)
    folder = os.path.realpath(version_dir) + os.sep
    with _load_lock:
        permanent = entry in sys.path
        before = set(sys.modules)
        cached = sys.path_importer_cache.get(entry)
        sys.path_importer_cache[entry] = _finder(entry)
        sys.path.append(entry)
        try:
            yield
        finally:
            if entry in sys.path:  # the last copy is the one appended above
                del sys.path[len(sys.path) - 1 - sys.path[::-1].index(entry)]
            if cached is None:
                sys.path_importer_cache.pop(entry, None)
            else:
                sys.path_importer_cache[entry] = cached
            for name in set(sys.modules) - before if not permanent else ():
                module = sys.modules.get(name)
                if name != keep and module is not None and _is_under(module, folder):
                    del sys.modules[name]


def import_model_file(model_file: Path, module_name: str) -> ModuleType:
    """Execute ``model_file`` as a new module registered as ``module_name``.

    The module is registered before it runs, as ``import`` does, because ``dataclasses``, ``pickle``
    and ``typing`` look classes up in ``sys.modules`` by their ``__module__``.
    """
    sys.modules[PB_UTILS_MODULE] = pb_utils
    path = str(model_file)
    spec = importlib.util.spec_from_file_location(module_name, path, loader=_SourceLoader(module_name, path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {model_file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def forget_module(module_name: str) -> None:
    """Drop a model module from ``sys.modules`` (on unload, or after a throwaway import)."""
    sys.modules.pop(module_name, None)
