"""Both server modes for the protocol suites: one process, and frontend workers over one engine.

A package that imports :func:`frontend_workers` into its ``conftest.py`` runs a test once per mode (ids
``in-process`` and ``workers``) when the test depends on that fixture: through a server fixture that
takes ``frontend_workers`` and passes it on to :class:`~tests.support.server.ServerProcess`, or by taking
it itself and passing it to the servers it starts.  A test that uses neither (a unit test, or one whose
server's behaviour is the engine's alone, such as an in-process server for a startup flag) runs once, so
that the second mode costs only what actually goes through the workers.  Behaviour must not differ
between the modes, so the same assertions hold for both.
"""

from __future__ import annotations

import pytest

#: Workers in the frontend-workers mode: two, so a second connection may land on another worker.
WORKERS = 2


@pytest.fixture(scope="session", params=[0, WORKERS], ids=["in-process", "workers"])
def frontend_workers(request: pytest.FixtureRequest) -> int:
    return int(request.param)
