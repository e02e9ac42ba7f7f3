"""``/v2/systemsharedmemory`` and ``/v2/cudasharedmemory``: Triton's shared memory extension over HTTP.

``[/region/<name>]/status`` (GET), ``/region/<name>/register`` (POST, a JSON body) and
``[/region/<name>]/unregister`` (POST; all regions without a name).  CUDA regions answer as Triton
built without GPU support does: status and unregister succeed on an empty set, register is refused.
Without ``--allow-client-shm`` registering and unregistering either kind is refused first (Triton's
UNSUPPORTED, 501), and the status answers.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from naiad.core.errors import InvalidArgumentError, NotFoundError
from naiad.dataplane import DataPlane

Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]
ReadBody = Callable[[], Awaitable[bytes]]

_JSON = (b"content-type", b"application/json")
#: Size of a ``cudaIpcMemHandle_t``.
_CUDA_HANDLE_SIZE = 64


def _route(rest: list[str]) -> tuple[str, str] | None:
    """``(region, action)`` from the path after the extension's name; ``None``: no such route."""
    if len(rest) == 1:
        return "", rest[0]
    if len(rest) == 3 and rest[0] == "region":
        return rest[1], rest[2]
    return None


async def system(dataplane: DataPlane, method: str, rest: list[str], read_body: ReadBody) -> Answer | None:
    """Serve a system shared memory route; ``None`` when the path is not one (404)."""
    route = _route(rest)
    if route is None or route[1] not in ("status", "register", "unregister"):
        return None
    region, action = route
    if (method != "GET") if action == "status" else (method != "POST"):
        return 405, orjson.dumps({"error": "Method Not Allowed"}), [_JSON]
    if action == "status":
        regions = [
            {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
            for r in await dataplane.region_status(region)
        ]
        return 200, orjson.dumps(regions), [_JSON]
    dataplane.shared_memory.require_enabled()
    if action == "unregister":
        await dataplane.unregister_region(region)
        return 200, b"", [_JSON]
    if not region:
        raise InvalidArgumentError("'region name' is necessary to register system shared memory region")
    body = _document(await read_body())
    key = body.get("key")
    if not isinstance(key, str):
        raise InvalidArgumentError("Shared memory register request has no 'key' field")
    if "byte_size" not in body:
        raise InvalidArgumentError("Shared memory register request has no 'byte_size' field")
    await dataplane.register_region(region, key, _unsigned(body, "offset"), _unsigned(body, "byte_size"))
    return 200, b"", [_JSON]


async def cuda(dataplane: DataPlane, method: str, rest: list[str], read_body: ReadBody) -> Answer | None:
    """Serve a CUDA shared memory route as a server without GPUs does; ``None``: no such route."""
    route = _route(rest)
    if route is None or route[1] not in ("status", "register", "unregister"):
        return None
    region, action = route
    if (method != "GET") if action == "status" else (method != "POST"):
        return 405, orjson.dumps({"error": "Method Not Allowed"}), [_JSON]
    if action == "status":
        if region:
            raise NotFoundError(f"Unable to find cuda shared memory region: '{region}'")
        return 200, b"[]", [_JSON]
    dataplane.shared_memory.require_enabled()
    if action == "unregister":
        return 200, b"", [_JSON]
    if not region:
        raise InvalidArgumentError("'region name' is necessary to register cuda shared memory region")
    body = _document(await read_body())
    handle = body.get("raw_handle")
    if not isinstance(handle, dict):
        raise InvalidArgumentError("Shared memory register request has no 'raw_handle' field")
    try:
        raw = base64.b64decode(str(handle.get("b64", "")), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != _CUDA_HANDLE_SIZE:
        raise InvalidArgumentError("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    raise InvalidArgumentError(
        f"failed to register CUDA shared memory region: '{region}', GPUs not supported"
    )


def _document(body: bytes) -> dict[str, Any]:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidArgumentError("failed to parse the request JSON buffer: expected a JSON object")
    return document


def _unsigned(body: dict[str, Any], field: str) -> int:
    value = body.get(field, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"Unable to parse '{field}': expected an unsigned integer")
    return int(value)
