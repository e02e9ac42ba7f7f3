"""Our own API error tree, so handlers never see the client library's exceptions.

As in kopf's ``_cogs/clients/errors.py``: the client library can change, the meaning of a 404 or a 409
cannot. ``transient`` errors are the ones worth retrying after a re-read; the rest are answers.
"""

from __future__ import annotations


class APIError(Exception):
    """A Kubernetes API call that did not succeed; ``status`` is the HTTP status (0: no answer)."""

    transient = False

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class NotFoundError(APIError):
    pass


class ConflictError(APIError):
    """409: someone else changed the object (or it already exists). Retried after a re-read."""

    transient = True


class InvalidError(APIError):
    """422: the API server rejected the object (schema, immutable field). Retrying cannot help."""


class ThrottledError(APIError):
    transient = True


class ServerError(APIError):
    transient = True


def error_for(status: int, message: str) -> APIError:
    """The error class for an HTTP status, in one place."""
    cls: type[APIError] = {
        404: NotFoundError,
        409: ConflictError,
        422: InvalidError,
        429: ThrottledError,
    }.get(status, ServerError if status == 0 or status >= 500 else APIError)
    return cls(status, message)
