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


#: How Triton's status names each code before its message (``Status::AsString``).
_CODE_TEXT = {
    ErrorCode.UNKNOWN: "Unknown",
    ErrorCode.INTERNAL: "Internal",
    ErrorCode.NOT_FOUND: "Not found",
    ErrorCode.INVALID_ARG: "Invalid argument",
    ErrorCode.UNAVAILABLE: "Unavailable",
    ErrorCode.UNSUPPORTED: "Unsupported",
    ErrorCode.ALREADY_EXISTS: "Already exists",
    ErrorCode.CANCELLED: "Cancelled",
}


def status_text(error: InferenceServerError) -> str:
    """``error`` as Triton's status prints it: its code's name, then its message (a message already
    in that form is kept as it is)."""
    message = error.message
    if any(message.startswith(f"{text}: ") for text in _CODE_TEXT.values()):
        return message
    return f"{_CODE_TEXT[error.code]}: {message}"


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


class ErrorResponse(InferenceServerError):
    """An error a model gave as a request's response (a Python model's ``InferenceResponse(error=...)``)
    rather than by failing: the client gets the error, and statistics and metrics count the request as
    a success, as Triton counts it (its Python backend reports a request failed only when it could
    send no response, e.g. ``execute`` raised; checked side by side with Triton 2.51)."""


class InvalidArgumentError(InferenceServerError):
    code = ErrorCode.INVALID_ARG


class NotFoundError(InferenceServerError):
    code = ErrorCode.NOT_FOUND



def request_prefix(request_id: str) -> str:
    """What Triton's core puts before a request's error (its ``LogRequest()``): the request's id,
    or ``<id_unknown>``."""
    return f"[request id: {request_id or '<id_unknown>'}] "

class RankError(InvalidArgumentError):
    """An input of more dimensions than numpy can hold (``MAX_RANK``), refused before any array exists.

    No model accepts such a shape; the frontend that decoded it answers with the model's own shape
    error (:meth:`naiad.core.signature.ModelSignature.refusal`), as Triton would, from these fields.
    """

    #: numpy's limit on the number of dimensions of an array.
    MAX_RANK = 64

    def __init__(self, request_id: str, name: str, datatype: str, shape: tuple[int, ...]) -> None:
        super().__init__(
            f"{request_prefix(request_id)}unexpected shape for input '{name}': "
            f"{len(shape)} dimensions"
        )
        self.request_id = request_id
        self.name = name
        self.datatype = datatype
        self.shape = shape


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


#: Triton's bound on a string sequence ID (``TRITONSERVER_InferenceRequestSetCorrelationIdString``), in bytes.
MAX_STRING_CORRELATION_ID = 128


def check_string_correlation_id(value: str) -> str:
    """``value`` when Triton would take it as a string sequence ID; its UNSUPPORTED error (HTTP 501,
    gRPC UNIMPLEMENTED) for a longer one, whatever the model."""
    if len(value) > MAX_STRING_CORRELATION_ID // 4 and len(value.encode()) > MAX_STRING_CORRELATION_ID:
        raise UnsupportedError(
            f"string correlation ID cannot be longer than {MAX_STRING_CORRELATION_ID} characters"
        )
    return value


def unknown_model(name: str) -> NotFoundError:
    """Triton's exact message for a model the repository does not know."""
    return NotFoundError(f"Request for unknown model: '{name}' is not found")
