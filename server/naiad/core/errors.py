"""One error vocabulary for the whole server.

Triton reports every failure as one of eight codes (``TRITONSERVER_Error_Code``); each frontend owns
exactly one table that maps a code to its transport's status (HTTP status, gRPC status code).  Nothing
below the frontends knows about HTTP or gRPC: code raises :class:`InferenceServerError` with the code
that Triton would use, and the message Triton would print.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    """Triton's error codes (``TRITONSERVER_ERROR_*``)."""

    UNKNOWN = "UNKNOWN"
    INTERNAL = "INTERNAL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"


class InferenceServerError(Exception):
    """An error with a Triton code; the message is what the client reads."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}: {self.message!r})"


class InvalidArgumentError(InferenceServerError):
    code = ErrorCode.INVALID_ARG


class NotFoundError(InferenceServerError):
    code = ErrorCode.NOT_FOUND


class UnavailableError(InferenceServerError):
    code = ErrorCode.UNAVAILABLE


class UnsupportedError(InferenceServerError):
    code = ErrorCode.UNSUPPORTED


class InternalError(InferenceServerError):
    code = ErrorCode.INTERNAL


class AlreadyExistsError(InferenceServerError):
    code = ErrorCode.ALREADY_EXISTS


class CancelledError(InferenceServerError):
    code = ErrorCode.CANCELLED


def unknown_model(name: str) -> NotFoundError:
    """Triton's exact message for a model the repository does not know."""
    return NotFoundError(f"Request for unknown model: '{name}' is not found")
