"""The runtime the backends are made by (``naiad.backends.runtime``)."""

from __future__ import annotations

import pytest
from naiad.backends.runtime import Runtime
from naiad.core.errors import UnavailableError


def test_each_backend_is_made_once_and_none_once_the_runtime_closed() -> None:
    """A load still running when the server stops (the repository's threads outlive its close) is
    refused its backend, rather than start what nothing would stop any more (a model process
    template); and ``close`` reads the backends once, under the lock those loads take."""
    runtime = Runtime()
    python = runtime.backend("python")
    assert runtime.backend("python") is python
    assert runtime.loaded_backend("python") is python
    runtime.close()
    for name in ("python", "onnxruntime"):
        with pytest.raises(UnavailableError, match="the server is stopping"):
            runtime.backend(name)
