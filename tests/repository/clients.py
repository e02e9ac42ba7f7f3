"""The repository API as the tests use it, one adapter per protocol.

Tests are written against :class:`RepositoryClient`, so a protocol is added by writing its adapter and
listing it in the ``protocol`` fixture (``tests/repository/conftest.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.support.http import RawClient

T = TypeVar("T")


class RepositoryClient(Protocol):
    def index(self, ready: bool = False) -> list[dict[str, str]]: ...

    def load(
        self,
        name: str,
        config: str | None = None,
        files: dict[str, bytes] | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None: ...

    def unload(self, name: str, unload_dependents: bool = False) -> None: ...

    def infer(
        self, name: str, version: str = "", value: int = 1, batched: bool = False
    ) -> tuple[str, int]: ...

    def mark(self, name: str, version: str = "", value: int = 1) -> str: ...

    def is_ready(self, name: str, version: str = "") -> bool: ...

    def server_ready(self) -> bool: ...

    def close(self) -> None: ...


#: gRPC status -> the HTTP status Triton gives the same error, so one expectation covers both.
_HTTP_STATUS = {
    "StatusCode.INVALID_ARGUMENT": "400",
    "StatusCode.NOT_FOUND": "404",
    "StatusCode.INTERNAL": "500",
    "StatusCode.UNIMPLEMENTED": "501",
    "StatusCode.UNAVAILABLE": "503",
}


def error_of(call: Any, *args: Any, **kwargs: Any) -> tuple[str, str]:
    """``(HTTP status, message)`` of the InferenceServerException ``call`` raises."""
    try:
        call(*args, **kwargs)
    except InferenceServerException as exc:
        status = str(exc.status())
        return _HTTP_STATUS.get(status, status), str(exc.message())
    raise AssertionError(f"{call.__name__} did not fail")


class HttpRepositoryClient:
    """tritonclient's HTTP client, plus raw requests for what it cannot send (``ready``, extra
    load parameters)."""

    def __init__(self, url: str) -> None:
        self.client = httpclient.InferenceServerClient(url, network_timeout=120, connection_timeout=120)
        self.raw = RawClient(url, timeout=120)

    def index(self, ready: bool = False) -> list[dict[str, str]]:
        if not ready:
            return list(self.client.get_model_repository_index())
        return list(self.raw.post_json("/v2/repository/index", {"ready": True}).json())

    def load(
        self,
        name: str,
        config: str | None = None,
        files: dict[str, bytes] | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        if not parameters:
            self.client.load_model(name, config=config, files=files)
            return
        body: dict[str, Any] = dict(parameters)
        if config is not None:
            body["config"] = config
        response = self.raw.post_json(f"/v2/repository/models/{name}/load", {"parameters": body})
        if response.status != 200:
            raise InferenceServerException(response.error, status=str(response.status))

    def unload(self, name: str, unload_dependents: bool = False) -> None:
        self.client.unload_model(name, unload_dependents=unload_dependents)

    def infer(self, name: str, version: str = "", value: int = 1, batched: bool = False) -> tuple[str, int]:
        """Infer on a marked model: ``MARK`` (``"<mark>:<version>"``) and the instance's execution count."""
        data = np.array([[value]] if batched else [value], dtype=np.int32)
        tensor = httpclient.InferInput("INPUT0", list(data.shape), "INT32")
        tensor.set_data_from_numpy(data)
        result = self.client.infer(name, [tensor], model_version=version)
        return bytes(result.as_numpy("MARK").reshape(-1)[0]).decode(), int(
            result.as_numpy("OUTPUT0").reshape(-1)[0]
        )

    def mark(self, name: str, version: str = "", value: int = 1) -> str:
        return self.infer(name, version, value)[0]

    def is_ready(self, name: str, version: str = "") -> bool:
        return bool(self.client.is_model_ready(name, version))

    def server_ready(self) -> bool:
        return bool(self.client.is_server_ready())

    def close(self) -> None:
        self.client.close()
        self.raw.close()


class GrpcRepositoryClient:
    """tritonclient's gRPC client, plus the raw stub for what it cannot send (``ready``, extra load
    parameters)."""

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.channel = grpc.insecure_channel(url)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    def index(self, ready: bool = False) -> list[dict[str, str]]:
        try:
            response = self.stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=ready))
        except grpc.RpcError as exc:
            raise InferenceServerException(exc.details(), status=str(exc.code())) from None
        document = json_format.MessageToDict(response, preserving_proto_field_name=True)
        return list(document.get("models", []))

    def load(
        self,
        name: str,
        config: str | None = None,
        files: dict[str, bytes] | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        if not parameters:
            self.client.load_model(name, config=config, files=files)
            return
        request = service_pb2.RepositoryModelLoadRequest(model_name=name)
        for key, value in {**parameters, **({"config": config} if config is not None else {})}.items():
            if isinstance(value, bool):
                request.parameters[key].bool_param = value
            elif isinstance(value, int):
                request.parameters[key].int64_param = value
            elif isinstance(value, bytes):
                request.parameters[key].bytes_param = value
            else:
                request.parameters[key].string_param = value
        try:
            self.stub.RepositoryModelLoad(request)
        except grpc.RpcError as exc:
            raise InferenceServerException(exc.details(), status=str(exc.code())) from None

    def unload(self, name: str, unload_dependents: bool = False) -> None:
        self.client.unload_model(name, unload_dependents=unload_dependents)

    def infer(self, name: str, version: str = "", value: int = 1, batched: bool = False) -> tuple[str, int]:
        data = np.array([[value]] if batched else [value], dtype=np.int32)
        tensor = grpcclient.InferInput("INPUT0", list(data.shape), "INT32")
        tensor.set_data_from_numpy(data)
        result = self.client.infer(name, [tensor], model_version=version)
        return bytes(result.as_numpy("MARK").reshape(-1)[0]).decode(), int(
            result.as_numpy("OUTPUT0").reshape(-1)[0]
        )

    def mark(self, name: str, version: str = "", value: int = 1) -> str:
        return self.infer(name, version, value)[0]

    def is_ready(self, name: str, version: str = "") -> bool:
        return bool(self.client.is_model_ready(name, version))

    def server_ready(self) -> bool:
        return bool(self.client.is_server_ready())

    def close(self) -> None:
        self.client.close()
        self.channel.close()


def rows(index: list[dict[str, str]], name: str) -> list[dict[str, str]]:
    """The index entries of one model, without its name."""
    return [{k: v for k, v in entry.items() if k != "name"} for entry in index if entry["name"] == name]


def eventually(probe: Callable[[], T], timeout: float = 8.0) -> T:
    """Poll ``probe`` until it returns something truthy (errors count as "not yet")."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = probe()
        except InferenceServerException:
            if time.monotonic() > deadline:
                raise
        else:
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.1)
