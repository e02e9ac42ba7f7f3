"""Triton error code -> HTTP status: the one table the HTTP frontend uses (Triton's HttpCodeFromError)."""

from __future__ import annotations

import orjson

from naiad.core.errors import ErrorCode, InferenceServerError

STATUS: dict[ErrorCode, int] = {
    ErrorCode.INTERNAL: 500,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.UNSUPPORTED: 501,
    ErrorCode.UNKNOWN: 400,
    ErrorCode.INVALID_ARG: 400,
    ErrorCode.ALREADY_EXISTS: 400,
    ErrorCode.CANCELLED: 400,
}


def status_of(error: InferenceServerError) -> int:
    return STATUS.get(error.code, 400)


def error_body(message: str) -> bytes:
    """Triton's error body: ``{"error": "<message>"}``."""
    return orjson.dumps({"error": message})
