"""``inference.GRPCInferenceService``: every RPC decodes, calls the data plane, and encodes.

Handlers take raw request bytes and parse them themselves: a malformed message is then the client's
INVALID_ARGUMENT like any other bad request (grpcio would answer INTERNAL for a failed deserializer),
and ModelInfer can keep tensor bytes in the received buffer (see :mod:`naiad.codecs.grpc_v2`).

CUDA shared memory answers as Triton built without GPU support does (status and unregister succeed
on an empty set, register is refused), so clients see a clear, familiar refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, cast

import grpc
from tritonclient.grpc import service_pb2 as pb

from naiad.codecs import grpc_v2
from naiad.codecs.version import model_version
from naiad.core.errors import (
    InferenceServerError,
    InvalidArgumentError,
    NotFoundError,
    RankError,
    UnsupportedError,
)
from naiad.core.request import InferRequest, InferResponse
from naiad.core.verbose import infer_failed
from naiad.dataplane import DataPlane, EmptyFinal
from naiad.frontends.forwarding import HeaderForwarding
from naiad.frontends.grpc import errors, extensions
from naiad.frontends.grpc.errors import Context
from naiad.frontends.grpc.relay import GrpcRelay, forwarded, relayed_metadata
from naiad.repository.peers import Peer
from naiad.tracing.trace import Trace

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


#: What a model endpoint relayed to a peer answers.
_Answer = TypeVar("_Answer", pb.ModelReadyResponse, pb.ModelMetadataResponse, pb.ModelConfigResponse)

#: One request of a stream: the messages answering it (``None`` after the last) and the task making them.
#: What a stream's writer takes, in order: messages to send (or, with ``triton_grpc_error``, the error
#: that ends the stream) and markers: a request fully answered, no more requests, the server stopping.
_Out = asyncio.Queue["bytes | InferenceServerError | object"]
_ANSWERED = object()
_READ_OVER = object()
_CLOSING = object()


def _wants_empty_final(message: pb.ModelInferRequest) -> bool:
    """Whether the client asked to see a decoupled model's final flag even without a response."""
    parameter = message.parameters.get("triton_enable_empty_final_response")
    if parameter is None or parameter.WhichOneof("parameter_choice") != "bool_param":
        return False
    return bool(parameter.bool_param)


def metadata_headers(context: Context) -> dict[str, str]:
    """The call's metadata as request headers (binary ``-bin`` values are left out)."""
    return {key: value for key, value in context.invocation_metadata() or () if isinstance(value, str)}


class InferenceServicer:
    """The RPCs, named as in the service; :func:`rpc_handler` binds them to the wire."""

    def __init__(
        self,
        dataplane: DataPlane,
        compression: grpc.Compression | None = None,
        forwarding: HeaderForwarding | None = None,
        relay: GrpcRelay | None = None,
    ) -> None:
        """``forwarding``: the metadata passed to models as request parameters; ``relay``: the calls
        to peers, for models a peer holds and this server does not serve (``--peers-file``)."""
        self.dataplane = dataplane
        self.compression = compression
        self.forwarding = forwarding
        self.relay = relay
        self._streams: set[_Out] = set()
        #: Inference RPCs taken up, numbered in the verbose log as Triton numbers its handlers' calls.
        self._handled = 0
        #: Whether unary requests in the plain form go to the data plane as their wire bytes (a
        #: frontend worker's does that; not when metadata becomes request parameters).
        self._plain = dataplane.answers_plain and forwarding is None

    # ---- health and metadata ----------------------------------------------------------------------

    async def ServerLive(self, request: pb.ServerLiveRequest, context: Context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.dataplane.live())

    async def ServerReady(self, request: pb.ServerReadyRequest, context: Context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.dataplane.ready())

    async def ModelReady(self, request: pb.ModelReadyRequest, context: Context) -> pb.ModelReadyResponse:
        version = model_version(request.version)
        if self.relay is not None and (peer := self._peer(request.name, version, context)) is not None:
            return await self._relay_unary(peer, request, context, "ModelReady", pb.ModelReadyResponse)
        return pb.ModelReadyResponse(ready=await self.dataplane.model_readiness(request.name, version))

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Context
    ) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(**self.dataplane.server_metadata())

    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Context
    ) -> pb.ModelMetadataResponse:
        version = model_version(request.version)
        if self.relay is not None and (peer := self._peer(request.name, version, context)) is not None:
            return await self._relay_unary(peer, request, context, "ModelMetadata", pb.ModelMetadataResponse)
        meta = self.dataplane.model_metadata(request.name, version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta.name,
            versions=meta.versions,
            platform=meta.platform,
            inputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in meta.inputs],
            outputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in meta.outputs],
        )

    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Context) -> pb.ModelConfigResponse:
        version = model_version(request.version)
        if self.relay is not None and (peer := self._peer(request.name, version, context)) is not None:
            return await self._relay_unary(peer, request, context, "ModelConfig", pb.ModelConfigResponse)
        return pb.ModelConfigResponse(config=self.dataplane.model_config_message(request.name, version))

    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Context
    ) -> pb.ModelStatisticsResponse:
        version = model_version(request.version)
        return extensions.statistics_response(await self.dataplane.model_statistics(request.name, version))

    # ---- inference --------------------------------------------------------------------------------

    async def ModelInfer(self, data: bytes, context: Context) -> bytes:
        if log.isEnabledFor(logging.DEBUG):
            self._log_handler("ModelInferHandler")
        parsed = None
        try:
            if self.relay is not None:
                parsed = grpc_v2.parse_infer_request(data)
                message = parsed.message
                version = model_version(message.model_version)
                peer = self._peer(message.model_name, version, context)
                if peer is not None:
                    self.dataplane.forwarded(message.model_name)
                    metadata = relayed_metadata(context.invocation_metadata() or ())
                    name, timeout = message.model_name, context.time_remaining()
                    return await self.relay.unary(peer, name, "ModelInfer", data, metadata, timeout)
            if self.dataplane.tracer.enabled:
                return await self._traced_infer(data, context)
            if parsed is None:
                parsed = grpc_v2.parse_infer_request(data)
            headers = metadata_headers(context)
            body = None
            if self._plain and (plain := grpc_v2.plain_request(parsed)) is not None:
                body = await self.dataplane.infer_plain(plain, headers, grpc_v2.encode_plain_response)
            if body is None:
                response = await self._infer(parsed, headers)
                body = grpc_v2.encode_infer_response(response, grpc_v2.shm_outputs(parsed.message))
            if self.compression is not None:
                context.set_compression(self.compression)
            return body
        except InferenceServerError as error:
            if log.isEnabledFor(logging.DEBUG):  # Triton's line for an inference refused or failed
                log.debug(infer_failed(self._failed_request_id(data), error.message))
            raise

    async def ModelStreamInfer(
        self, requests: AsyncIterator[bytes], context: Context
    ) -> AsyncIterator[bytes]:
        """Answer each request with all its responses, with up to :data:`STREAM_WINDOW` running at once.

        A decoupled model's request gets 0..N responses, each with ``triton_final_response``; the final
        flag on its own (no response) reaches only clients that set
        ``triton_enable_empty_final_response``.  A decoupled model's responses go out as it sends
        them, whatever the stream's other requests do (as in Triton: a request that ends sooner is
        answered sooner); any other request is answered in the order the requests arrived, once every
        earlier request's answers are sent.  A failed request is answered in-band (``error_message``)
        and the stream goes on; requests are submitted in arrival order, so a model with one instance
        also executes them in that order.  When the server stops, requests already received are
        answered and the stream then ends, so an idle stream does not hold the exit for the whole
        grace period.

        A stream opened with the header ``triton_grpc_error: true`` (Triton's opt-in) ends instead at the
        first error the model answers, with that error's gRPC status; requests refused before they reach
        the model are still answered in-band, as Triton does.
        """
        if self.compression is not None:
            context.set_compression(self.compression)
        headers = metadata_headers(context)
        grpc_errors = headers.get("triton_grpc_error") == "true"
        window = asyncio.Semaphore(STREAM_WINDOW)
        out: _Out = asyncio.Queue()
        tasks: set[asyncio.Future[None]] = set()
        received = 0

        async def read() -> None:
            nonlocal received
            previous: asyncio.Future[None] | None = None
            loop = asyncio.get_running_loop()
            try:
                async for data in requests:
                    await window.acquire()
                    done = loop.create_future()
                    task = asyncio.ensure_future(
                        self._stream_answers(data, headers, out, grpc_errors, previous, done)
                    )
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                    received += 1
                    previous = done
            finally:
                out.put_nowait(_READ_OVER)

        reader = asyncio.ensure_future(read())
        self._streams.add(out)
        answered = 0
        reading = True
        try:
            while reading or answered < received:
                message = await out.get()
                if message is _ANSWERED:
                    answered += 1
                    window.release()
                elif message is _READ_OVER:
                    reading = False
                elif message is _CLOSING:  # answer what came, take no more
                    reader.cancel()
                elif isinstance(message, InferenceServerError):
                    raise message  # triton_grpc_error: the stream ends with the error's status
                else:
                    yield cast(bytes, message)
        finally:
            self._streams.discard(out)
            reader.cancel()
            for task in list(tasks):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    def close(self) -> None:
        """End every stream once the requests it already received are answered."""
        for out in self._streams:
            out.put_nowait(_CLOSING)

    async def _stream_answers(
        self,
        data: bytes,
        headers: dict[str, str],
        out: _Out,
        grpc_errors: bool,
        previous: asyncio.Future[None] | None,
        done: asyncio.Future[None],
    ) -> None:
        """Put the messages answering one request into ``out``, then ``_ANSWERED``, and set ``done``
        once they and every earlier request's are in.  Those of a request that is answered in order
        wait for ``previous`` (the earlier request's ``done``); a decoupled model's go at once.

        With ``grpc_errors``, an error the model answers goes in as the error itself.
        """
        request_id = ""
        accepted = False
        in_order = True
        held: list[bytes | InferenceServerError] = []

        def emit(message: bytes | InferenceServerError) -> None:
            if in_order and previous is not None and not previous.done():
                held.append(message)
            else:
                out.put_nowait(message)

        if log.isEnabledFor(logging.DEBUG):
            self._log_handler("ModelStreamInferHandler")
        try:
            parsed = grpc_v2.parse_infer_request(data)
            message = parsed.message
            request_id = message.id
            version = model_version(message.model_version)
            if self.relay is not None:
                peer = self.dataplane.peer(message.model_name, version, forwarded(headers))
                if peer is not None:
                    # the peer's answers are the model's: with triton_grpc_error its error ends the stream
                    accepted = True
                    self.dataplane.forwarded(message.model_name)
                    sent = relayed_metadata(headers.items())
                    async for relayed in self.relay.stream(peer, message.model_name, data, sent):
                        emit(relayed)
                    return
            if self.dataplane.loads_on_demand:
                await self.dataplane.admit(message.model_name)
            decoupled = self.dataplane.is_decoupled(message.model_name, version)
            request = self._request(parsed, headers)
            in_shm = grpc_v2.shm_outputs(message)
            if decoupled and in_shm:
                raise UnsupportedError("outputs in shared memory are not supported for decoupled models")
            empty_final = decoupled and _wants_empty_final(message)
            # a decoupled model's request is refused before the model runs (raised) or answered (items);
            # any other model's execution errors are raised too, once the request was parsed and routed
            accepted = not decoupled
            in_order = not decoupled
            async for answer, final in self.dataplane.stream(request):
                if isinstance(answer, InferenceServerError):
                    if log.isEnabledFor(logging.DEBUG):
                        log.debug(infer_failed(request_id, answer.message))
                    emit(answer if grpc_errors else grpc_v2.encode_stream_error(answer.message, request_id))
                elif empty_final or not isinstance(answer, EmptyFinal):
                    emit(grpc_v2.encode_stream_response(answer, final, in_shm))
        except InferenceServerError as error:
            if log.isEnabledFor(logging.DEBUG):
                log.debug(infer_failed(request_id, error.message))
            in_band = not (grpc_errors and accepted)
            emit(grpc_v2.encode_stream_error(error.message, request_id) if in_band else error)
        except Exception as error:
            log.exception("unhandled error serving ModelStreamInfer")
            emit(grpc_v2.encode_stream_error(errors.internal_message(error), request_id))
        finally:
            try:
                if previous is not None:
                    await previous
            finally:  # (also when the stream ends meanwhile)
                for held_message in held:
                    out.put_nowait(held_message)
                out.put_nowait(_ANSWERED)
                if not done.done():
                    done.set_result(None)

    async def _traced_infer(self, data: bytes, context: Context) -> bytes:
        """ModelInfer while tracing is on: the request may be sampled (see :mod:`naiad.tracing`)."""
        started = time.monotonic_ns()
        parsed = grpc_v2.parse_infer_request(data)
        headers = metadata_headers(context)
        tracer = self.dataplane.tracer
        trace = tracer.begin(parsed.message.model_name, "GRPC", headers, started)
        try:
            response = await self._infer(parsed, headers, trace=trace)
            if self.compression is not None:
                context.set_compression(self.compression)
            if trace is not None:
                trace.sending()
            return grpc_v2.encode_infer_response(response, grpc_v2.shm_outputs(parsed.message))
        finally:
            if trace is not None:
                tracer.end(trace)

    async def _infer(
        self,
        parsed: grpc_v2.ParsedInferRequest,
        headers: dict[str, str],
        *,
        trace: Trace | None = None,
    ) -> InferResponse:
        """Triton's order: version string, model, transaction policy, then the request itself."""
        message = parsed.message
        version = model_version(message.model_version)
        if self.dataplane.loads_on_demand:
            await self.dataplane.admit(message.model_name)
        if self.dataplane.is_decoupled(message.model_name, version):
            raise UnsupportedError(_DECOUPLED)
        request = self._request(parsed, headers)
        if trace is None:
            return await self.dataplane.infer(request)
        trace.received(request)
        response = await self.dataplane.infer(request)
        trace.answered(response)
        return response

    def _peer(self, name: str, version: str, context: Context) -> Peer | None:
        """The peer to ask instead, for a model not served here (see :meth:`DataPlane.peer`)."""
        return self.dataplane.peer(name, version, forwarded(metadata_headers(context)))

    async def _relay_unary(
        self,
        peer: Peer,
        request: pb.ModelReadyRequest | pb.ModelMetadataRequest | pb.ModelConfigRequest,
        context: Context,
        method: str,
        response_type: type[_Answer],
    ) -> _Answer:
        """A model endpoint's answer from ``peer`` (metadata, config, readiness)."""
        assert self.relay is not None
        self.dataplane.forwarded(request.name)
        metadata = relayed_metadata(context.invocation_metadata() or ())
        data = request.SerializeToString()
        answer = await self.relay.unary(peer, request.name, method, data, metadata, context.time_remaining())
        return response_type.FromString(answer)

    def _failed_request_id(self, data: bytes) -> str:
        """The id Triton's failure line names: the request's once the request exists (its model and
        version found), else none, as Triton's request is made only for a model it has."""
        try:
            message = grpc_v2.parse_infer_request(data).message
            self.dataplane.signature(message.model_name, model_version(message.model_version))
        except Exception:
            return ""
        return message.id

    def _log_handler(self, handler: str) -> None:
        """Triton's verbose lines for an inference RPC taken up (``--log-verbose`` 1 and up)."""
        self._handled += 1
        log.debug("New request handler for %s, %d", handler, self._handled)
        log.debug("Process for %s, rpc_ok=1, %d step START", handler, self._handled)

    def _request(self, parsed: grpc_v2.ParsedInferRequest, headers: dict[str, str]) -> InferRequest:
        """The core request: tensors read (from shared memory too), forwarded headers added."""
        try:
            request = grpc_v2.to_infer_request(parsed, headers, self.dataplane.shared_memory)
        except RankError as exc:  # more dimensions than an array holds: the model's own shape error
            name, version = parsed.message.model_name, model_version(parsed.message.model_version)
            raise self.dataplane.signature(name, version).refusal(exc) from None
        if self.forwarding is not None:
            self.forwarding.apply(request, headers.items())
        return request

    # ---- model repository -------------------------------------------------------------------------

    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Context
    ) -> pb.RepositoryIndexResponse:
        if request.repository_name:
            raise UnsupportedError(_REPOSITORY_NAME)
        return pb.RepositoryIndexResponse(
            models=[
                pb.RepositoryIndexResponse.ModelIndex(
                    name=entry.name, version=entry.version, state=entry.state, reason=entry.reason
                )
                for entry in await self.dataplane.repository_index(request.ready)
            ]
        )

    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Context
    ) -> pb.RepositoryModelLoadResponse:
        if request.repository_name:
            raise UnsupportedError(_REPOSITORY_NAME)
        parameters = grpc_v2.repository_parameters(request.parameters)
        await self.dataplane.load_model(request.model_name, parameters)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> pb.RepositoryModelUnloadResponse:
        if request.repository_name:
            raise UnsupportedError(_REPOSITORY_NAME)
        dependents = grpc_v2.repository_parameters(request.parameters).get("unload_dependents", False)
        if not isinstance(dependents, bool):
            raise InvalidArgumentError("Unable to parse 'unload_dependents': expected a boolean")
        await self.dataplane.unload_model(request.model_name, dependents)
        return pb.RepositoryModelUnloadResponse()

    # ---- shared memory ----------------------------------------------------------------------------

    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Context
    ) -> pb.SystemSharedMemoryStatusResponse:
        status = pb.SystemSharedMemoryStatusResponse()
        for region in await self.dataplane.region_status(request.name):
            status.regions[region.name].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(
                    name=region.name, key=region.key, offset=region.offset, byte_size=region.byte_size
                )
            )
        return status

    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Context
    ) -> pb.SystemSharedMemoryRegisterResponse:
        self.dataplane.shared_memory.require_enabled()
        if not request.name:
            raise InvalidArgumentError("'region name' is necessary to register system shared memory region")
        await self.dataplane.register_region(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Context
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        await self.dataplane.unregister_region(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Context
    ) -> pb.CudaSharedMemoryStatusResponse:
        if request.name:
            raise NotFoundError(f"Unable to find cuda shared memory region: '{request.name}'")
        return pb.CudaSharedMemoryStatusResponse()

    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Context
    ) -> pb.CudaSharedMemoryRegisterResponse:
        self.dataplane.shared_memory.require_enabled()
        raise InvalidArgumentError(
            f"failed to register CUDA shared memory region: '{request.name}', GPUs not supported"
        )

    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Context
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        self.dataplane.shared_memory.require_enabled()
        return pb.CudaSharedMemoryUnregisterResponse()

    # ---- trace and logging ------------------------------------------------------------------------

    async def TraceSetting(
        self, request: pb.TraceSettingRequest, context: Context
    ) -> pb.TraceSettingResponse:
        if request.settings:
            changes = extensions.trace_changes(request)
            settings = await self.dataplane.update_trace_settings(request.model_name, changes)
            return extensions.trace_response(settings)
        return extensions.trace_response(await self.dataplane.trace_settings(request.model_name))

    async def LogSettings(self, request: pb.LogSettingsRequest, context: Context) -> pb.LogSettingsResponse:
        if request.settings:
            settings = await self.dataplane.update_log_settings(extensions.log_changes(request))
            return extensions.log_response(settings)
        return extensions.log_response(await self.dataplane.log_settings())


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
