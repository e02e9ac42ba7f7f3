"""Access control on the gRPC service: each RPC's API group and scope, checked by an interceptor.

Restricted protocols answer as Triton does: UNAVAILABLE, ``This protocol is restricted, expecting
header 'triton-grpc-protocol-<h>'`` (the client sends the header under that prefixed name).  Bearer
keys answer UNAUTHENTICATED without a valid token and PERMISSION_DENIED with one that lacks the
scope.  The check runs before the request message is read, so a refused call costs no parsing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from naiad.frontends.access.groups import Api, Need, Scope
from naiad.frontends.access.policy import AccessPolicy, Refusal

#: What tritonserver prefixes restricted-protocol headers with.
HEADER_PREFIX = "triton-grpc-protocol-"

_RPCS: dict[str, tuple[Api, Need]] = {
    "/inference.GRPCInferenceService/ServerLive": (Api.HEALTH, None),
    "/inference.GRPCInferenceService/ServerReady": (Api.HEALTH, None),
    "/inference.GRPCInferenceService/ModelReady": (Api.HEALTH, None),
    "/grpc.health.v1.Health/Check": (Api.HEALTH, None),
    "/grpc.health.v1.Health/Watch": (Api.HEALTH, None),
    "/inference.GRPCInferenceService/ServerMetadata": (Api.METADATA, Scope.READ),
    "/inference.GRPCInferenceService/ModelMetadata": (Api.METADATA, Scope.READ),
    "/inference.GRPCInferenceService/ModelInfer": (Api.INFERENCE, Scope.INFER),
    "/inference.GRPCInferenceService/ModelStreamInfer": (Api.INFERENCE, Scope.INFER),
    "/inference.GRPCInferenceService/ModelConfig": (Api.MODEL_CONFIG, Scope.READ),
    "/inference.GRPCInferenceService/ModelStatistics": (Api.STATISTICS, Scope.READ),
    "/inference.GRPCInferenceService/RepositoryIndex": (Api.MODEL_REPOSITORY, Scope.READ),
    "/inference.GRPCInferenceService/RepositoryModelLoad": (Api.MODEL_REPOSITORY, Scope.ADMIN),
    "/inference.GRPCInferenceService/RepositoryModelUnload": (Api.MODEL_REPOSITORY, Scope.ADMIN),
    "/inference.GRPCInferenceService/SystemSharedMemoryStatus": (Api.SHARED_MEMORY, Scope.READ),
    "/inference.GRPCInferenceService/SystemSharedMemoryRegister": (Api.SHARED_MEMORY, Scope.ADMIN),
    "/inference.GRPCInferenceService/SystemSharedMemoryUnregister": (Api.SHARED_MEMORY, Scope.ADMIN),
    "/inference.GRPCInferenceService/CudaSharedMemoryStatus": (Api.SHARED_MEMORY, Scope.READ),
    "/inference.GRPCInferenceService/CudaSharedMemoryRegister": (Api.SHARED_MEMORY, Scope.ADMIN),
    "/inference.GRPCInferenceService/CudaSharedMemoryUnregister": (Api.SHARED_MEMORY, Scope.ADMIN),
    # one RPC both reads and changes these settings: changing needs admin, so the RPC does
    "/inference.GRPCInferenceService/TraceSetting": (Api.TRACE, Scope.ADMIN),
    "/inference.GRPCInferenceService/LogSettings": (Api.LOGGING, Scope.ADMIN),
}

_STATUS = {
    Refusal.RESTRICTED: grpc.StatusCode.UNAVAILABLE,
    Refusal.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    Refusal.FORBIDDEN: grpc.StatusCode.PERMISSION_DENIED,
}


class AccessInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpcio has no type stubs
    """Refuses the calls ``policy`` refuses, with the status of the refusal."""

    def __init__(self, policy: AccessPolicy) -> None:
        self.policy = policy

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        route = _RPCS.get(handler_call_details.method)
        if handler is None or route is None:
            return handler
        metadata = handler_call_details.invocation_metadata or ()
        headers = {key: value for key, value in metadata if isinstance(value, str)}
        denial = self.policy.check(*route, headers)
        if denial is None:
            return handler
        message = denial.message
        if denial.reason is Refusal.RESTRICTED:
            message = f"This protocol is restricted, expecting header '{message}'"
        return _refusing(handler, _STATUS[denial.reason], message)


def _refusing(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s kind that ends the call with ``code`` without reading a message."""

    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(code, message)

    async def streaming(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        await context.abort(code, message)
        yield None  # never reached: makes this a response stream

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(streaming)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(streaming)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(unary)
    return grpc.unary_unary_rpc_method_handler(unary)
