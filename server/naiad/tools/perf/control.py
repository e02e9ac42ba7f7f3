"""The control plane a profiler needs (metadata, config, statistics, shared memory, load/unload).

Two implementations with one shape of answer: the HTTP one reads the JSON bodies, the gRPC one converts
the protobuf answers to the same JSON (``preserving_proto_field_name``), so the rest of the tool never
asks which protocol it speaks.  Plain ``urllib`` for HTTP: the tool must run with the server's own
dependencies only (``tritonclient[http]`` is a test extra).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Protocol

import grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

Json = dict[str, Any]


class ControlError(Exception):
    """The server refused a control request; the message is the server's."""


class Control(Protocol):
    def metadata(self, model: str, version: str) -> Json: ...
    def config(self, model: str, version: str) -> Json: ...
    def statistics(self, model: str, version: str) -> Json: ...
    def register_system_shm(self, name: str, key: str, byte_size: int) -> None: ...
    def unregister_system_shm(self, name: str) -> None: ...
    def load(self, model: str, config: Json | None = None) -> None: ...
    def unload(self, model: str) -> None: ...
    def close(self) -> None: ...


def _model_path(model: str, version: str) -> str:
    path = f"/v2/models/{urllib.parse.quote(model, safe='')}"
    return f"{path}/versions/{urllib.parse.quote(version, safe='')}" if version else path


class HttpControl:
    """KServe v2 over HTTP/JSON."""

    def __init__(self, url: str, timeout: float = 120.0) -> None:
        self.base = url if "://" in url else f"http://{url}"
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Json | None = None) -> Json:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read()
        except urllib.error.HTTPError as error:
            raise ControlError(_error_text(error.read()) or f"HTTP {error.code}") from None
        except (urllib.error.URLError, OSError) as error:
            raise ControlError(f"cannot reach {self.base}: {error}") from None
        return json.loads(text) if text else {}

    def metadata(self, model: str, version: str) -> Json:
        return self._call("GET", _model_path(model, version))

    def config(self, model: str, version: str) -> Json:
        return self._call("GET", _model_path(model, version) + "/config")

    def statistics(self, model: str, version: str) -> Json:
        return self._call("GET", _model_path(model, version) + "/stats")

    def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        body = {"key": key, "offset": 0, "byte_size": byte_size}
        self._call("POST", f"/v2/systemsharedmemory/region/{name}/register", body)

    def unregister_system_shm(self, name: str) -> None:
        self._call("POST", f"/v2/systemsharedmemory/region/{name}/unregister", {})

    def load(self, model: str, config: Json | None = None) -> None:
        body: Json = {} if config is None else {"parameters": {"config": json.dumps(config)}}
        self._call("POST", f"/v2/repository/models/{urllib.parse.quote(model, safe='')}/load", body)

    def unload(self, model: str) -> None:
        self._call("POST", f"/v2/repository/models/{urllib.parse.quote(model, safe='')}/unload", {})

    def close(self) -> None:
        return None


def _error_text(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error", ""))
    except (ValueError, AttributeError):
        return body.decode(errors="replace")


class GrpcControl:
    """``inference.GRPCInferenceService`` with the answers as JSON dictionaries."""

    def __init__(self, url: str, timeout: float = 120.0) -> None:
        self.channel = grpc.insecure_channel(url)
        self.stub = pbg.GRPCInferenceServiceStub(self.channel)
        self.timeout = timeout

    def _call(self, method: str, request: Any) -> Json:
        try:
            response = getattr(self.stub, method)(request, timeout=self.timeout)
        except grpc.RpcError as error:
            raise ControlError(str(error.details() or error.code())) from None
        answer: Json = json_format.MessageToDict(response, preserving_proto_field_name=True)
        return answer

    def metadata(self, model: str, version: str) -> Json:
        return self._call("ModelMetadata", pb.ModelMetadataRequest(name=model, version=version))

    def config(self, model: str, version: str) -> Json:
        answer = self._call("ModelConfig", pb.ModelConfigRequest(name=model, version=version))
        return dict(answer.get("config", {}))

    def statistics(self, model: str, version: str) -> Json:
        return self._call("ModelStatistics", pb.ModelStatisticsRequest(name=model, version=version))

    def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        request = pb.SystemSharedMemoryRegisterRequest(name=name, key=key, offset=0, byte_size=byte_size)
        self._call("SystemSharedMemoryRegister", request)

    def unregister_system_shm(self, name: str) -> None:
        self._call("SystemSharedMemoryUnregister", pb.SystemSharedMemoryUnregisterRequest(name=name))

    def load(self, model: str, config: Json | None = None) -> None:
        request = pb.RepositoryModelLoadRequest(model_name=model)
        if config is not None:
            request.parameters["config"].string_param = json.dumps(config)
        self._call("RepositoryModelLoad", request)

    def unload(self, model: str) -> None:
        self._call("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name=model))

    def close(self) -> None:
        self.channel.close()


def connect(protocol: str, url: str) -> Control:
    return GrpcControl(url) if protocol == "grpc" else HttpControl(url)
