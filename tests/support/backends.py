"""Backends for tests that load models without a server, made as the server makes them: through a
:class:`~naiad.backends.runtime.Runtime`, one for the test process, so each backend (and the Python
backend's template process) is made once.  Its BLS server stays unset: such a test makes no BLS call."""

from __future__ import annotations

from naiad.backends.base import Backend
from naiad.backends.runtime import Runtime

_RUNTIME = Runtime()


def get_backend(name: str) -> Backend:
    """The backend called ``name``, as the server's runtime would make it."""
    return _RUNTIME.backend(name)
