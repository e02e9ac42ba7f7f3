"""Scratch folders for a benchmark's repositories, scripts and bodies, removed when it exits: benchmarks
are run many times over, and each run left its folders in the temporary folder."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path


def scratch(prefix: str = "bench-") -> Path:
    """A new folder, removed at the interpreter's exit (a forked child leaves through ``os._exit`` and
    removes nothing)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder
