"""The server as its backends see it: one :class:`Runtime`, made by the composition root.

Backends need a few things of the server they run in (the Python backend: where its models' BLS
requests go).  The composition root (:mod:`naiad.app`) makes one runtime and hands it down: the
repository creates every backend through it, and each backend that needs the server is constructed
with it, so nothing reaches the server through a module global and two servers in one process (as
tests make) never share state.  The data plane, which BLS requests go through, exists only after the
repository, so the root fills ``bls`` and ``in_flight`` in once it has made it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from naiad.backends import registry
from naiad.backends.base import Backend
from naiad.backends.settings import BackendSettings
from naiad.core.errors import UnavailableError
from naiad.ipc.arena import SharedArenas

if TYPE_CHECKING:
    from naiad.backends.python.bls import Server

#: The ``runtime`` Triton writes into the config of a model served by a Python-based backend.
PYTHON_RUNTIME = "model.py"


class Runtime:
    """The backends a server uses (each made once, when a model first needs it) and its BLS server."""

    def __init__(
        self,
        shared_onnx_threads: bool = False,
        backend_directory: Path | None = None,
        settings: BackendSettings | None = None,
    ) -> None:
        #: Where Python-based backends live (``--backend-directory``; see :meth:`python_based`).
        self.backend_directory = backend_directory
        #: What ``--backend-config`` gives each backend (read by a backend when it is made).
        self.settings = settings or BackendSettings(backend_directory=backend_directory)
        #: Whether ONNX Runtime sessions share the process-wide thread pools rather than own theirs:
        #: a server that loads and evicts models while it serves does (see
        #: :mod:`naiad.backends.onnxruntime.session`).  Process-wide once the backend exists.
        self.shared_onnx_threads = shared_onnx_threads
        #: Where BLS requests go (``None`` until the server serves, or in a tool that only loads
        #: models: a model's BLS call then fails with the reason).
        self.bls: Server | None = None
        #: How many requests the server is answering now (the data plane's count; none until it
        #: serves): a model process's host watches for a lone execution's results only while that
        #: execution is the server's only work, since the watch holds the event loop.
        self.in_flight: Callable[[], int] = _nothing
        #: The frontend workers' request arenas, lent to model processes (none without workers).
        self.arenas = SharedArenas()
        self._backends: dict[str, Backend] = {}
        #: Models load on the repository's threads, several at once: one of each backend is made,
        #: and none once the runtime closed.
        self._lock = threading.Lock()
        self._closed = False

    def backend(self, name: str) -> Backend:
        """The backend called ``name``; UNAVAILABLE with the reason when it cannot be used here, or
        once the runtime closed (a load still running when the server stopped fails then, rather
        than start what nothing would stop: the Python backend's template)."""
        backend = self._backends.get(name)
        if backend is not None and not self._closed:
            return backend
        with self._lock:
            if self._closed:
                raise UnavailableError("the server is stopping")
            backend = self._backends.get(name)
            if backend is None:
                backend = self._backends[name] = registry.create(name, self)
        return backend

    def python_based(self, name: str) -> Path | None:
        """The ``model.py`` of a Python-based backend called ``name`` (Triton's layout:
        ``<backend directory>/<name>/model.py``, run on the Python backend), or None: one of this
        server's own backends, or none found."""
        if registry.built_in(name) or self.backend_directory is None or not name or "/" in name:
            return None
        model_file = self.backend_directory / name / PYTHON_RUNTIME
        return model_file if model_file.is_file() else None

    def loaded_backend(self, name: str) -> Backend | None:
        """The backend called ``name`` if a model has needed it already (never imports one)."""
        return self._backends.get(name)

    def close(self) -> None:
        """Release what backends hold beyond their models (the Python backend's model process
        template), once the repository closed every model."""
        with self._lock:
            self._closed = True
            backends = list(self._backends.values())
        for backend in backends:
            if isinstance(backend, _Closes):
                backend.close()


@runtime_checkable
class _Closes(Protocol):
    def close(self) -> None: ...


def _nothing() -> int:
    return 0
