"""tritonclient over HTTP or gRPC behind one face, so each extension test runs on both protocols."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.server import ServerProcess

PROTOCOLS = ["http", "grpc"]


@dataclass
class Client:
    """A tritonclient client and its module (``InferInput`` etc. differ per protocol)."""

    protocol: str
    module: ModuleType
    client: Any

    def shm_status(self, name: str = "") -> dict[str, dict[str, int | str]]:
        """Region name -> status, the same shape for both protocols."""
        if self.protocol == "http":
            return {r["name"]: r for r in self.client.get_system_shared_memory_status(name)}
        regions = self.client.get_system_shared_memory_status(name, as_json=True).get("regions", {})
        return {
            n: {"name": r["name"], "key": r["key"], "offset": int(r.get("offset", 0)),
                "byte_size": int(r["byte_size"])}
            for n, r in regions.items()
        }

    def input(self, name: str, shape: list[int], datatype: str) -> Any:
        return self.module.InferInput(name, shape, datatype)

    def output(self, name: str, **kwargs: Any) -> Any:
        return self.module.InferRequestedOutput(name, **kwargs)


def connect(protocol: str, server: ServerProcess, **kwargs: Any) -> Client:
    if protocol == "http":
        return Client(protocol, httpclient, httpclient.InferenceServerClient(server.http_url, **kwargs))
    return Client(protocol, grpcclient, grpcclient.InferenceServerClient(server.grpc_url, **kwargs))


@contextmanager
def client_for(protocol: str, server: ServerProcess, **kwargs: Any) -> Iterator[Client]:
    client = connect(protocol, server, **kwargs)
    try:
        yield client
    finally:
        client.client.close()


@contextmanager
def refused(status: str, message: str) -> Iterator[None]:
    """Expect an ``InferenceServerException`` with ``status`` (``"400"``, ``"StatusCode.X"``) whose
    message contains ``message``."""
    with pytest.raises(InferenceServerException) as caught:
        yield
    assert caught.value.status() == status, caught.value
    assert message in (caught.value.message() or ""), caught.value.message()


def status_of(protocol: str, http: int, grpc: str) -> str:
    """The exception status tritonclient reports for a refusal on ``protocol``."""
    return str(http) if protocol == "http" else f"StatusCode.{grpc}"
