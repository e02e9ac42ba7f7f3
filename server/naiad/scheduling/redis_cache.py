"""The Redis response cache (``--cache-config redis,host=H --cache-config redis,port=P``).

Triton's image ships it beside the local cache, and for a fleet it is the one that pays: every replica
of a model answers from what any replica computed, a new pod starts warm, and the entries live as long
as Redis does rather than as long as a pod.  The settings are Triton's (``host``, ``port``, ``user``,
``password``, ``db``, ``connect_timeout``, ``socket_timeout``, ``pool_size`` and ``wait_timeout`` in
milliseconds, ``tls_enabled`` with ``cert``, ``key``, ``cacert`` and ``cacert_dir``; the user and
password also from ``TRITONCACHE_REDIS_USERNAME`` / ``TRITONCACHE_REDIS_PASSWORD``, which the settings
override), so a Triton deployment's flags and secrets carry over.

The server pings Redis before it serves and does not start without it, in Triton's words (``failed
to connect to Redis (host:port): Connection refused``, Redis's own ``WRONGPASS`` / ``NOAUTH``).  Once
it serves, Redis going away costs the cache, never a request: a lookup that fails is a miss, and an
insertion that fails is logged.

An entry is one Redis string per response (MessagePack: each output's name, datatype, shape and bytes,
and the response's parameters) under ``naiad:v1:<key in hex>``: the prefix keeps entries apart from
anything else in a shared Redis (Triton's own entries are hashes under bare keys), and the format's
version keeps a server from misreading entries another release wrote.  Nothing expires: Redis's own
memory policy (``maxmemory`` with an ``allkeys-*`` eviction policy) bounds the cache, as for Triton's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

import msgspec
import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError, RedisError

from naiad.core.atoi import atoi
from naiad.core.datatypes import WIRE_DTYPE
from naiad.core.request import InferResponse, Tensor
from naiad.scheduling.cache import CacheInsertionError, CacheUnavailable, ResponseCache

log = logging.getLogger("naiad.cache")
_T = TypeVar("_T")

_PREFIX = "naiad:v1:"
#: Settings Triton's Redis cache reads; any other is named in a warning and ignored.
_KNOWN = {
    "host", "port", "user", "password", "db", "connect_timeout", "socket_timeout", "pool_size",
    "wait_timeout", "tls_enabled", "cert", "key", "cacert", "cacert_dir", "sni",
}  # fmt: skip
#: Redis's error codes, which redis-py drops from its exceptions' messages: put back, so the log says
#: what Redis said (and what Triton's log says).
_AUTH_CODES = (("invalid username-password pair", "WRONGPASS"), ("Authentication required", "NOAUTH"))


class _StoredTensor(msgspec.Struct, array_like=True, frozen=True):
    name: str
    datatype: str
    shape: list[int]
    #: The elements' little-endian bytes, or a BYTES tensor's items.
    data: bytes | list[bytes]
    parameters: dict[str, Any]


class _StoredResponse(msgspec.Struct, array_like=True, frozen=True):
    outputs: list[_StoredTensor]
    parameters: dict[str, Any]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_StoredResponse)


class RedisCache(ResponseCache):
    """Responses in Redis, through a pool of ``pool_size`` connections (1 by default, as Triton's)."""

    def __init__(self, client: aioredis.Redis) -> None:
        super().__init__()
        self._client = client

    @classmethod
    async def connect(
        cls, settings: Mapping[str, str], environ: Mapping[str, str] = os.environ
    ) -> RedisCache:
        """A cache on the Redis ``settings`` name, once it answered a ping; :class:`CacheUnavailable`
        when it did not."""
        options = connection_options(settings, environ)
        client = aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool(**options))
        try:
            await client.ping()
        except RedisError as error:
            await client.aclose()
            reason = _reason(error, settings["host"], options["port"])
            raise CacheUnavailable(f"Failed to initialize RedisCache: {reason}") from error
        log.debug("Successfully connected to Redis")
        return cls(client)

    async def fetch(self, key: bytes, model_name: str, version: str) -> InferResponse | None:
        try:
            blob: bytes | str | None = await _in_task(self._client.get(_PREFIX + key.hex()))
        except RedisError as error:  # (a miss: the model answers, the insertion will say why)
            log.debug("Failed to retrieve key: %s. %s", key.hex(), error)
            return None
        if blob is None:
            return None
        try:
            stored = _decoder.decode(blob.encode() if isinstance(blob, str) else blob)
            return _response(stored, model_name, version)
        except (msgspec.DecodeError, KeyError, ValueError) as error:
            log.warning("ignored the unreadable response cache entry %s%s: %s", _PREFIX, key.hex(), error)
            return None

    async def store(self, key: bytes, response: InferResponse) -> bool:
        """Always a new entry, as for Triton's Redis cache: a twin's entry is written over."""
        try:
            await _in_task(self._client.set(_PREFIX + key.hex(), _encoder.encode(_stored(response))))
        except RedisError as error:  # (the Redis cache's words)
            raise CacheInsertionError(f"Failed to insert key: {key.hex()}. {error}") from error
        return True

    async def close(self) -> None:
        await self._client.aclose()


def _in_task(call: Awaitable[_T]) -> asyncio.Future[_T]:
    """``call`` in a task of its own: the engine drives a waiting request without one
    (``naiad.engine.link``), and redis-py bounds its calls with ``asyncio.timeout``, which needs one."""
    return asyncio.ensure_future(call)


def connection_options(settings: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, Any]:
    """redis-py's connection-pool arguments for Triton's settings (numbers read as C's ``atoi`` reads
    them, as Triton's cache does: ``port=nonexistent`` is port 0, refused when connecting)."""
    for name in sorted(set(settings) - _KNOWN):
        log.warning("ignored --cache-config redis,%s: the Redis cache has no such setting", name)
    if "sni" in settings:
        log.warning("ignored --cache-config redis,sni: TLS names the server by its host")
    options: dict[str, Any] = {
        "host": settings["host"],
        "port": atoi(settings["port"]),
        "username": settings.get("user", environ.get("TRITONCACHE_REDIS_USERNAME")),
        "password": settings.get("password", environ.get("TRITONCACHE_REDIS_PASSWORD")),
        "db": atoi(settings.get("db", "0")),
        "socket_connect_timeout": _seconds(settings.get("connect_timeout", "0")),
        "socket_timeout": _seconds(settings.get("socket_timeout", "0")),
        "max_connections": max(1, atoi(settings.get("pool_size", "1"))),
        "timeout": _seconds(settings.get("wait_timeout", "1000")),
        # RESP2 with AUTH, which every Redis speaks; Redis's NOAUTH when a password is missing
        "protocol": 2,
    }
    if settings.get("tls_enabled") == "true":
        options.update(
            connection_class=aioredis.SSLConnection,
            ssl_certfile=settings.get("cert"),
            ssl_keyfile=settings.get("key"),
            ssl_ca_certs=settings.get("cacert"),
            ssl_ca_path=settings.get("cacert_dir"),
        )
    return options


def _seconds(milliseconds: str) -> float | None:
    """A timeout in milliseconds as redis-py takes it: seconds, ``None`` (no limit) for 0."""
    value = atoi(milliseconds)
    return value / 1000 if value > 0 else None


def _reason(error: RedisError, host: str, port: int) -> str:
    """What Triton's log says for a Redis that does not answer: the system's reason for a connection
    that failed, Redis's own reply (with its code) for credentials it refused."""
    text = str(error)
    if isinstance(error, AuthenticationError):
        for start, code in _AUTH_CODES:
            if text.startswith(start):
                return f"{code} {text}"
        return text
    cause = error.__context__
    if isinstance(cause, socket.gaierror):
        return f"failed to connect to Redis ({host}:{port}): {cause.strerror}"
    if isinstance(cause, OSError):  # (no errno: every address of the host failed, each said)
        why = os.strerror(cause.errno) if cause.errno else str(cause)
        return f"failed to connect to Redis ({host}:{port}): {why}"
    return text


def _stored(response: InferResponse) -> _StoredResponse:
    outputs = []
    for tensor in response.outputs:
        data: bytes | list[bytes]
        if tensor.datatype == "BYTES":
            items = tensor.data.reshape(-1)
            data = [item if isinstance(item, bytes) else str(item).encode() for item in items]
        else:
            data = np.ascontiguousarray(tensor.data, dtype=WIRE_DTYPE[tensor.datatype]).tobytes()
        shape = list(tensor.data.shape)
        outputs.append(_StoredTensor(tensor.name, tensor.datatype, shape, data, dict(tensor.parameters)))
    return _StoredResponse(outputs, dict(response.parameters))


def _response(stored: _StoredResponse, model_name: str, version: str) -> InferResponse:
    """The response an entry holds, its arrays read-only as the local cache's are."""
    outputs = []
    for tensor in stored.outputs:
        if isinstance(tensor.data, list):
            data = np.empty(len(tensor.data), dtype=np.object_)
            data[:] = tensor.data
            data = data.reshape(tensor.shape)
            data.flags.writeable = False
        else:  # (a view of the bytes Redis sent, read-only as they are)
            data = np.frombuffer(tensor.data, dtype=WIRE_DTYPE[tensor.datatype]).reshape(tensor.shape)
        outputs.append(Tensor(tensor.name, tensor.datatype, data, dict(tensor.parameters)))
    return InferResponse(model_name, version, outputs=outputs, parameters=dict(stored.parameters))
