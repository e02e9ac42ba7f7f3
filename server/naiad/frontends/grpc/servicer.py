"""``inference.GRPCInferenceService``: every RPC decodes, calls the data plane, and encodes.

Handlers take raw request bytes and parse them themselves: a malformed message is then the client's
INVALID_ARGUMENT like any other bad request (grpcio would answer INTERNAL for a failed deserializer),
and ModelInfer can keep tensor bytes in the received buffer (see :mod:`naiad.codecs.grpc_v2`).

RPCs whose feature is not in this server yet (statistics, trace, dynamic logging, shared memory)
answer with the status and message Triton gives when that feature is off, so clients see a
clear, familiar refusal rather than a crash or an empty success.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb

from naiad.codecs import grpc_v2
from naiad.core.errors import (
    InferenceServerError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    UnsupportedError,
)
from naiad.core.request import InferResponse
from naiad.dataplane import DataPlane
from naiad.frontends.grpc import errors
from naiad.frontends.grpc.errors import Context

log = logging.getLogger("naiad.grpc")

SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
#: Requests a single ModelStreamInfer stream may have in flight before reading pauses (backpressure).
STREAM_WINDOW = 128
#: ``--grpc-infer-response-compression-level`` -> the algorithm gRPC core ranks for that level.
COMPRESSION = {
    "none": None,
    "low": grpc.Compression.Gzip,
    "medium": grpc.Compression.Deflate,
    "high": grpc.Compression.Deflate,
}

_DECOUPLED = "ModelInfer RPC doesn't support models with decoupled transaction policy"
_REPOSITORY_NAME = "'repository_name' specification is not supported"
_CLIENT_SHM = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."


def metadata_headers(context: Context) -> dict[str, str]:
    """The call's metadata as request headers (binary ``-bin`` values are left out)."""
    return {key: value for key, value in context.invocation_metadata() or () if isinstance(value, str)}


class InferenceServicer:
    """The RPCs, named as in the service; :func:`rpc_handler` binds them to the wire."""

    def __init__(self, dataplane: DataPlane, compression: grpc.Compression | None = None) -> None:
        self.dataplane = dataplane
        self.compression = compression
        self._streams: set[asyncio.Queue[asyncio.Future[bytes] | None]] = set()
        self._closed = False

    # ---- health and metadata ----------------------------------------------------------------------

    async def ServerLive(self, request: Any, context: Context) -> Any:
        return pb.ServerLiveResponse(live=self.dataplane.live())

    async def ServerReady(self, request: Any, context: Context) -> Any:
        return pb.ServerReadyResponse(ready=self.dataplane.ready())

    async def ModelReady(self, request: Any, context: Context) -> Any:
        version = grpc_v2.model_version(request.version)
        return pb.ModelReadyResponse(ready=self.dataplane.model_ready(request.name, version))

    async def ServerMetadata(self, request: Any, context: Context) -> Any:
        return pb.ServerMetadataResponse(**self.dataplane.server_metadata())

    async def ModelMetadata(self, request: Any, context: Context) -> Any:
        meta = self.dataplane.model_metadata(request.name, grpc_v2.model_version(request.version))
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta.name,
            versions=meta.versions,
            platform=meta.platform,
            inputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in meta.inputs],
            outputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in meta.outputs],
        )

    async def ModelConfig(self, request: Any, context: Context) -> Any:
        version = grpc_v2.model_version(request.version)
        return pb.ModelConfigResponse(config=self.dataplane.model_config_message(request.name, version))

    async def ModelStatistics(self, request: Any, context: Context) -> Any:
        raise UnavailableError("the server does not support model statistics")

    # ---- inference --------------------------------------------------------------------------------

    async def ModelInfer(self, data: bytes, context: Context) -> bytes:
        parsed = grpc_v2.parse_infer_request(data)
        response = await self._infer(parsed, metadata_headers(context), decoupled_ok=False)
        if self.compression is not None:
            context.set_compression(self.compression)
        return grpc_v2.encode_infer_response(response)

    async def ModelStreamInfer(
        self, requests: AsyncIterator[bytes], context: Context
    ) -> AsyncIterator[bytes]:
        """Answer each request in order, with up to :data:`STREAM_WINDOW` of them running at once.

        A failed request is answered in-band (``error_message``) and the stream goes on; requests are
        submitted in arrival order, so a model with one instance also executes them in that order.
        When the server stops, requests already received are answered and the stream then ends, so an
        idle stream does not hold the exit for the whole grace period.
        """
        if self.compression is not None:
            context.set_compression(self.compression)
        headers = metadata_headers(context)
        window = asyncio.Semaphore(STREAM_WINDOW)
        answers: asyncio.Queue[asyncio.Future[bytes] | None] = asyncio.Queue()

        async def read() -> None:
            try:
                async for data in requests:
                    await window.acquire()
                    answers.put_nowait(asyncio.ensure_future(self._stream_answer(data, headers)))
            finally:
                answers.put_nowait(None)

        reader = asyncio.ensure_future(read())
        self._streams.add(answers)
        try:
            while (answer := await answers.get()) is not None:
                yield await answer
                window.release()
            if not self._closed:
                await reader
        finally:
            self._streams.discard(answers)
            reader.cancel()
            while not answers.empty():
                pending = answers.get_nowait()
                if pending is not None:
                    pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    def close(self) -> None:
        """End every stream once the requests it already received are answered."""
        self._closed = True
        for answers in self._streams:
            answers.put_nowait(None)

    async def _stream_answer(self, data: bytes, headers: dict[str, str]) -> bytes:
        request_id = ""
        try:
            parsed = grpc_v2.parse_infer_request(data)
            request_id = parsed.message.id
            response = await self._infer(parsed, headers, decoupled_ok=True)
            return grpc_v2.encode_stream_response(response)
        except InferenceServerError as error:
            return grpc_v2.encode_stream_error(error.message, request_id)
        except Exception as error:
            log.exception("unhandled error serving ModelStreamInfer")
            return grpc_v2.encode_stream_error(errors.internal_message(error), request_id)

    async def _infer(
        self, parsed: grpc_v2.ParsedInferRequest, headers: dict[str, str], *, decoupled_ok: bool
    ) -> InferResponse:
        """Triton's order: version string, model, transaction policy, then the request itself."""
        message = parsed.message
        version = grpc_v2.model_version(message.model_version)
        if self.dataplane.is_decoupled(message.model_name, version) and not decoupled_ok:
            raise UnsupportedError(_DECOUPLED)
        return await self.dataplane.infer(grpc_v2.to_infer_request(parsed, headers))

    # ---- model repository -------------------------------------------------------------------------

    async def RepositoryIndex(self, request: Any, context: Context) -> Any:
        if request.repository_name:
            raise UnsupportedError(_REPOSITORY_NAME)
        return pb.RepositoryIndexResponse(
            models=[
                pb.RepositoryIndexResponse.ModelIndex(
                    name=entry.name, version=entry.version, state=entry.state, reason=entry.reason
                )
                for entry in self.dataplane.repository_index(request.ready)
            ]
        )

    async def RepositoryModelLoad(self, request: Any, context: Context) -> Any:
        if request.repository_name:
            raise UnsupportedError(_REPOSITORY_NAME)
        parameters = grpc_v2.repository_parameters(request.parameters)
        await self.dataplane.load_model(request.model_name, parameters)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: Any, context: Context) -> Any:
        if request.repository_name:
            raise UnsupportedError(_REPOSITORY_NAME)
        dependents = grpc_v2.repository_parameters(request.parameters).get("unload_dependents", False)
        if not isinstance(dependents, bool):
            raise InvalidArgumentError("Unable to parse 'unload_dependents': expected a boolean")
        await self.dataplane.unload_model(request.model_name, dependents)
        return pb.RepositoryModelUnloadResponse()

    # ---- shared memory: none can be registered, so there is never a region to report or remove ----

    async def SystemSharedMemoryStatus(self, request: Any, context: Context) -> Any:
        if request.name:
            raise NotFoundError(f"Unable to find system shared memory region: '{request.name}'")
        return pb.SystemSharedMemoryStatusResponse()

    async def SystemSharedMemoryRegister(self, request: Any, context: Context) -> Any:
        raise UnavailableError(_CLIENT_SHM)

    async def SystemSharedMemoryUnregister(self, request: Any, context: Context) -> Any:
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(self, request: Any, context: Context) -> Any:
        if request.name:
            raise NotFoundError(f"Unable to find cuda shared memory region: '{request.name}'")
        return pb.CudaSharedMemoryStatusResponse()

    async def CudaSharedMemoryRegister(self, request: Any, context: Context) -> Any:
        raise InvalidArgumentError(
            f"failed to register CUDA shared memory region: '{request.name}', GPUs not supported"
        )

    async def CudaSharedMemoryUnregister(self, request: Any, context: Context) -> Any:
        return pb.CudaSharedMemoryUnregisterResponse()

    # ---- trace and logging ------------------------------------------------------------------------

    async def TraceSetting(self, request: Any, context: Context) -> Any:
        raise UnavailableError("the server does not support trace")

    async def LogSettings(self, request: Any, context: Context) -> Any:
        raise UnavailableError("the server does not support dynamic logging")


def _parsing(
    method: Callable[[Any, Context], Awaitable[Any]], request_type: Any
) -> Callable[[bytes, Context], Awaitable[Any]]:
    async def call(data: bytes, context: Context) -> Any:
        return await method(grpc_v2.parse(request_type, data), context)

    return call


def rpc_handler(servicer: InferenceServicer) -> grpc.GenericRpcHandler:
    """Bind every RPC of the service descriptor to ``servicer`` (a missing one fails at start-up)."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in SERVICE.methods:
        call = getattr(servicer, method.name)
        if method.name == "ModelStreamInfer":
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(errors.stream(call, method.name))
        elif method.name == "ModelInfer":
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(errors.unary(call, method.name))
        else:
            request_type = getattr(pb, method.input_type.name)
            response_type = getattr(pb, method.output_type.name)
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                errors.unary(_parsing(call, request_type), method.name),
                response_serializer=response_type.SerializeToString,
            )
    return grpc.method_handlers_generic_handler(SERVICE.full_name, handlers)
