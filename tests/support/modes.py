"""Both server modes for the protocol suites: one process, and frontend workers over one engine.

A package that imports these fixtures into its ``conftest.py`` runs every test twice, once per mode
(ids ``in-process`` and ``workers``): its server fixtures take ``frontend_workers`` and pass it on, and
servers a test starts itself get it through :data:`tests.support.server.FRONTEND_WORKERS`.  Behaviour
must not differ between the modes, so the same assertions hold for both.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import server

#: Workers in the frontend-workers mode: two, so a second connection may land on another worker.
WORKERS = 2


@pytest.fixture(scope="session", params=[0, WORKERS], ids=["in-process", "workers"])
def frontend_workers(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture(autouse=True)
def _server_mode(frontend_workers: int) -> Iterator[None]:
    previous, server.FRONTEND_WORKERS = server.FRONTEND_WORKERS, frontend_workers
    yield
    server.FRONTEND_WORKERS = previous
