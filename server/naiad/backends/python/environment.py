"""Triton's custom execution environments (``EXECUTION_ENV_PATH``) for Python models.

As in Triton, the parameter names a conda-pack archive (``.tar.gz``/``.tgz``/``.tar``) or, since
Triton 23.x, a folder holding an environment; the model then runs with that environment's Python and
packages.  An archive is extracted once per server into a cache folder named after the archive's
path, size and modification time, so every instance and every restart reuses it; a conda-pack
archive's ``conda-unpack`` fixes its prefixes after extraction, as Triton runs it.  An archive with an
entry that would land outside that folder is refused whole (a model repository is not
trusted to write elsewhere on the node).

The model process runs the environment's ``bin/python`` with the engine's ``naiad`` package first on
its path and the engine's own ``site-packages`` last: the environment's packages win, and what the
stub needs but the environment lacks (numpy, say) still imports, from an environment built for the
same Python version.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sysconfig
import tarfile
import tempfile
import threading
from pathlib import Path, PurePosixPath

from naiad.backends.python.zygote import SOURCE_ROOT
from naiad.core.errors import InvalidArgumentError

_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")


def _refuse_escape(member: tarfile.TarInfo) -> None:
    """An entry that would land outside the extraction folder refuses the whole archive, in the
    words of the library Triton extracts with (libarchive's secure-extraction checks).  ``tarfile``'s
    ``tar`` filter then refuses writing through a link to outside; links may point outside, as in
    Triton (a packed venv's ``bin/python`` names the interpreter it was made from)."""
    name = member.name
    if name.startswith("/"):
        raise tarfile.TarError(f"entry '{name}': Path is absolute")
    if ".." in PurePosixPath(name).parts:
        raise tarfile.TarError(f"entry '{name}': Path contains '..'")


class Environments:
    """Extracted environments, by archive, under ``cache``."""

    def __init__(self, cache: Path | None = None) -> None:
        self._cache = cache or Path(tempfile.gettempdir()) / f"naiad-python-envs-{os.getuid()}"
        self._lock = threading.Lock()

    def folder(self, path: Path) -> Path:
        """The environment's folder: ``path`` itself, or where its archive was extracted."""
        if path.is_dir():
            return path
        if not path.is_file() or not path.name.endswith(_ARCHIVE_SUFFIXES):
            raise InvalidArgumentError(
                f"EXECUTION_ENV_PATH '{path}' is neither a folder nor a .tar.gz/.tgz/.tar archive"
            )
        stat = path.stat()
        key = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
        target = self._cache / key
        with self._lock:
            if not target.is_dir():
                self._extract(path, target)
        return target

    def _extract(self, archive: Path, target: Path) -> None:
        self._cache.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="extracting-", dir=self._cache))
        try:
            with tarfile.open(archive) as tar:
                for member in tar:
                    _refuse_escape(member)
                tar.extractall(scratch, filter="tar")
            unpack = scratch / "bin" / "conda-unpack"
            if unpack.is_file():
                subprocess.run([str(unpack)], cwd=scratch, check=True, capture_output=True, timeout=300)
            os.replace(scratch, target)  # atomic: another server sees the whole folder or none
        except (OSError, tarfile.TarError, subprocess.SubprocessError) as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            if target.is_dir():  # another server extracted it meanwhile
                return
            raise InvalidArgumentError(f"EXECUTION_ENV_PATH '{archive}' cannot be extracted: {exc}") from exc

    def command(self, path: Path) -> tuple[list[str], dict[str, str]]:
        """``argv`` and environment variables that run the stub on descriptor 3 (logging to 4) with
        the environment's Python."""
        folder = self.folder(path)
        python = next(
            (folder / "bin" / name for name in ("python3", "python") if (folder / "bin" / name).exists()),
            None,
        )
        if python is None:
            raise InvalidArgumentError(f"EXECUTION_ENV_PATH '{path}' holds no bin/python3")
        engine_packages = sysconfig.get_paths()["purelib"]
        bootstrap = (
            "import sys; "
            f"sys.path.append({engine_packages!r}); "
            "from naiad.backends.python.stub import main; "
            "sys.exit(main(['stub', '3', '4']))"
        )
        env = dict(os.environ)
        env["PYTHONPATH"] = SOURCE_ROOT
        env["PATH"] = os.pathsep.join([str(folder / "bin"), env.get("PATH", "")])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            filter(None, [str(folder / "lib"), env.get("LD_LIBRARY_PATH")])
        )
        env.pop("PYTHONHOME", None)
        return [str(python), "-c", bootstrap], env
