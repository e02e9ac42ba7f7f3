"""HTTP handlers of the statistics, trace and logging extensions (Triton's routes and bodies).

``GET /v2/models[/{m}[/versions/{v}]]/stats``, ``GET/POST /v2[/models/{m}]/trace/setting`` and
``GET/POST /v2/logging``: each decodes Triton's JSON, calls the data plane and encodes its answer.
Trace setting values are JSON strings (``trace_level`` an array of them) and ``null`` clears a key;
log settings take JSON booleans, an unsigned ``log_verbose_level`` and a ``log_format`` string.
"""

from __future__ import annotations

from typing import Any

import orjson

from naiad.core.errors import InvalidArgumentError
from naiad.dataplane import DataPlane

#: Request headers that carry an OpenTelemetry trace context (W3C Trace Context).
_PROPAGATION = (b"traceparent", b"tracestate")


async def statistics(dataplane: DataPlane, name: str, version: str) -> bytes:
    return orjson.dumps(await dataplane.model_statistics(name, version))


async def trace_setting(dataplane: DataPlane, model: str, body: bytes | None) -> bytes:
    """The settings (``body`` is ``None`` for a GET), after applying the update a POST carries."""
    if body is None:
        return orjson.dumps(await dataplane.trace_settings(model))
    changes: dict[str, list[str] | None] = {}
    for key, value in _object(body).items():
        if value is None or key == "trace_file":
            changes[key] = None
        elif key == "trace_level":
            if not isinstance(value, list) or not all(isinstance(level, str) for level in value):
                raise InvalidArgumentError("attempt to access JSON non-array as array")
            changes[key] = value
        elif key in ("trace_rate", "trace_count", "log_frequency"):
            if not isinstance(value, str):
                raise InvalidArgumentError("attempt to access JSON non-string as string")
            changes[key] = [value]
    return orjson.dumps(await dataplane.update_trace_settings(model, changes))


async def logging_setting(dataplane: DataPlane, body: bytes | None) -> bytes:
    if body is None:
        return orjson.dumps(await dataplane.log_settings())
    return orjson.dumps(await dataplane.update_log_settings(_object(body)))


def trace_headers(headers: dict[bytes, bytes]) -> dict[str, str]:
    """The request's trace-context headers, for a trace that continues the caller's."""
    return {key.decode(): headers[key].decode("latin-1") for key in _PROPAGATION if key in headers}


def _object(body: bytes) -> dict[str, Any]:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidArgumentError("failed to parse the request JSON buffer: expected a JSON object")
    return document
