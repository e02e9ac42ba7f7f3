"""Fixtures for model management: servers in each control mode, clients per protocol, object stores."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from tests.repository.clients import GrpcRepositoryClient, HttpRepositoryClient, RepositoryClient
from tests.support.object_store import GcsEmulator, SeaweedS3
from tests.support.server import ServerProcess

#: Protocols the repository API tests run over (one adapter each in ``tests/repository/clients.py``).
PROTOCOLS = ["http", "grpc"]

ServerFactory = Callable[..., AbstractContextManager[ServerProcess]]


@pytest.fixture(scope="module", params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    """Module-scoped, so a module's shared server and repository are made once per protocol and the
    tests of one protocol never see what the other's did."""
    return str(request.param)


def connect(protocol: str, server: ServerProcess) -> RepositoryClient:
    if protocol == "http":
        return HttpRepositoryClient(server.http_url)
    if protocol == "grpc":
        return GrpcRepositoryClient(server.grpc_url)
    raise ValueError(f"no repository client for {protocol}")


@pytest.fixture
def serve() -> ServerFactory:
    """``with serve(repo, "--model-control-mode=explicit") as server: ...`` (waits for readiness unless
    ``wait_ready=False``)."""

    @contextmanager
    def start(
        repo: Path | str,
        *args: str,
        wait_ready: bool = True,
        env: dict[str, str] | None = None,
        frontend_workers: int = 0,
    ) -> Iterator[ServerProcess]:
        with ServerProcess(
            [repo], list(args), wait_ready=wait_ready, env=env, frontend_workers=frontend_workers
        ) as server:
            yield server

    return start


@pytest.fixture(scope="session")
def s3() -> Iterator[SeaweedS3]:
    with SeaweedS3() as store:
        yield store


@pytest.fixture(scope="session")
def gcs() -> Iterator[GcsEmulator]:
    with GcsEmulator() as store:
        yield store
