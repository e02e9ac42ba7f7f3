"""The data plane: everything the HTTP and gRPC frontends do, once.

Frontends decode their wire format into core types, call one method here, and encode what comes back.
So the rules (which version serves, request validation, output selection and order, readiness) live in
one place and the two protocols cannot drift apart.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from naiad.core.errors import InferenceServerError, InvalidArgumentError, UnavailableError
from naiad.core.request import InferRequest, InferResponse, Tensor
from naiad.core.signature import ModelSignature
from naiad.repository.manager import IndexEntry, ModelRepository
from naiad.repository.model import Model

SERVER_NAME = "triton"
SERVER_VERSION = "2.51.0"
#: Triton extensions this server implements (reported by ``GET /v2`` and ServerMetadata).
EXTENSIONS = ["model_repository", "model_configuration", "binary_tensor_data", "parameters"]


@dataclass(frozen=True, slots=True)
class TensorMetadata:
    name: str
    datatype: str
    shape: list[int]


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


class DataPlane:
    """The server's behaviour, independent of transport."""

    def __init__(self, repository: ModelRepository, *, strict_readiness: bool = True) -> None:
        self.repository = repository
        self.strict_readiness = strict_readiness
        self.started = False
        self.exiting = False
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    # ---- health and metadata ----------------------------------------------------------------

    def live(self) -> bool:
        return not self.exiting

    def ready(self) -> bool:
        if self.exiting or not self.started:
            return False
        return self.repository.all_ready() if self.strict_readiness else True

    def server_metadata(self) -> dict[str, Any]:
        return {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": list(EXTENSIONS)}

    def model_ready(self, name: str, version: str) -> bool:
        """Whether a request for ``version`` ("" = the default version) would be served now."""
        if self.exiting:
            return False
        try:
            self.repository.resolve(name, version)
        except InferenceServerError:
            return False
        return True

    def model_metadata(self, name: str, version: str) -> ModelMetadata:
        model, signature = self._ready_model(name, version)
        versions = [version] if version else [str(v) for v in model.ready_versions()]
        return ModelMetadata(
            name=name,
            versions=versions,
            platform=model.platform,
            inputs=[TensorMetadata(s.name, s.datatype, signature.full_shape(s)) for s in signature.inputs],
            outputs=[TensorMetadata(s.name, s.datatype, signature.full_shape(s)) for s in signature.outputs],
        )

    def model_config(self, name: str, version: str) -> dict[str, Any]:
        model, _ = self._ready_model(name, version)
        assert model.config_json is not None
        return model.config_json

    def model_config_message(self, name: str, version: str) -> Any:
        """The normalized ``ModelConfig`` protobuf (the gRPC frontend sends it as is)."""
        model, _ = self._ready_model(name, version)
        return model.config

    def signature(self, name: str, version: str) -> ModelSignature:
        return self._ready_model(name, version)[1]

    def is_decoupled(self, name: str, version: str) -> bool:
        return self._ready_model(name, version)[0].decoupled

    def repository_index(self, ready_only: bool = False) -> list[IndexEntry]:
        return self.repository.index(ready_only)

    async def load_model(self, name: str, parameters: dict[str, Any]) -> None:
        """Repository extension: load or reload ``name`` (model control mode EXPLICIT only).

        ``parameters``: ``config`` (str), ``file:<version>/<name>`` (``str`` = base64 text as HTTP
        carries it, ``bytes`` = raw content as gRPC's ``bytes_param`` carries it) and the Naiad
        extension ``default_version`` (int, or str of digits; "" or -1 unpins): see
        :mod:`naiad.repository.overrides`.
        """
        await self.repository.load_model(name, parameters)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Repository extension: unload ``name`` (model control mode EXPLICIT only)."""
        await self.repository.unload_model(name, unload_dependents)

    def _ready_model(self, name: str, version: str) -> tuple[Model, ModelSignature]:
        model, _ = self.repository.resolve(name, version)
        assert model.signature is not None
        return model, model.signature

    # ---- inference ----------------------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResponse:
        """Validate, schedule and shape the response for one request."""
        if self.exiting:
            raise UnavailableError("Server is exiting")
        model, version = self.repository.resolve(request.model_name, request.model_version)
        signature = model.signature
        assert signature is not None
        signature.validate(request)
        self._inflight += 1
        self._idle.clear()
        try:
            response = await version.submit(request)
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()
        response.model_name = model.name
        response.model_version = str(version.version)
        response.id = request.id
        response.outputs = _select_outputs(request, signature, response.outputs)
        return response

    async def drain(self, timeout: float) -> bool:
        """Refuse new requests and wait up to ``timeout`` seconds for in-flight ones."""
        self.exiting = True
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True


def _select_outputs(request: InferRequest, signature: ModelSignature, produced: list[Tensor]) -> list[Tensor]:
    """The outputs the client asked for, in the order it asked (config order when it named none)."""
    by_name = {t.name: t for t in produced}
    if request.outputs is None:
        ordered = [by_name.pop(s.name) for s in signature.outputs if s.name in by_name]
        return ordered + list(by_name.values())
    selected: list[Tensor] = []
    for output in request.outputs:
        tensor = by_name.get(output.name)
        if tensor is None:
            raise InvalidArgumentError(
                f"model '{signature.name}' did not produce the requested output '{output.name}'"
            )
        selected.append(tensor)
    return selected
