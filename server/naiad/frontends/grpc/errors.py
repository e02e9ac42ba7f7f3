"""Triton error code -> gRPC status: the one table the gRPC frontend uses (Triton's grpc_utils.cc).

Handlers raise :class:`~naiad.core.errors.InferenceServerError` like the rest of the server; the two
guards below turn that into the call's status.  Anything else is a bug: it is logged with its traceback
and costs the one call an INTERNAL status, never the server.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeAlias, TypeVar

import grpc

from naiad.core.errors import ErrorCode, InferenceServerError

log = logging.getLogger("naiad.grpc")

STATUS: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.UNKNOWN: grpc.StatusCode.UNKNOWN,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorCode.CANCELLED: grpc.StatusCode.CANCELLED,
}

Request = TypeVar("Request")
Response = TypeVar("Response")
#: grpcio ships no type information: its context is typed as what it is, ``Any``, in one place.
Context: TypeAlias = Any


def status_of(error: InferenceServerError) -> grpc.StatusCode:
    return STATUS.get(error.code, grpc.StatusCode.UNKNOWN)


def internal_message(error: Exception) -> str:
    """What a client reads about a server bug (the traceback goes to the log)."""
    return f"internal error: {type(error).__name__}: {error}"


async def _abort(context: Context, error: Exception, what: str) -> NoReturn:
    if isinstance(error, InferenceServerError):
        await context.abort(status_of(error), error.message)
    log.exception("unhandled error serving %s", what)
    await context.abort(grpc.StatusCode.INTERNAL, internal_message(error))
    raise AssertionError("ServicerContext.abort returned")  # it always raises


def unary(
    handler: Callable[[Request, Context], Awaitable[Response]], name: str
) -> Callable[[Request, Context], Awaitable[Response]]:
    """Guard a unary handler: its errors become the call's status."""

    @functools.wraps(handler)
    async def guarded(request: Request, context: Context) -> Response:
        try:
            return await handler(request, context)
        except Exception as error:
            await _abort(context, error, name)

    return guarded


def stream(
    handler: Callable[[Request, Context], AsyncIterator[Response]], name: str
) -> Callable[[Request, Context], AsyncIterator[Response]]:
    """Guard a streaming handler: an error that escapes it ends the stream with its status."""

    @functools.wraps(handler)
    async def guarded(requests: Request, context: Context) -> AsyncIterator[Response]:
        try:
            async for response in handler(requests, context):
                yield response
        except Exception as error:
            await _abort(context, error, name)

    return guarded
