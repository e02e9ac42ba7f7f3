"""The response cache (``--cache-config``, ``response_cache { enable: true }``).

Two caches, as Triton's image has: ``local`` (``--cache-config local,size=N``), one least-recently-used
cache in the server's memory, bounded in bytes; and ``redis`` (:mod:`naiad.scheduling.redis_cache`),
shared by every server that names the same Redis.  Both hold whole model responses keyed by a digest of
the model name, the version, every input (name, datatype, shape, bytes) and the request parameters.
The model name and version are in the key, so models never see each other's entries; the parameters
are too (beyond Triton, whose key ignores them), because a custom parameter may change what a model
answers.  A hit answers without the queue or the model.

Entries hold every output the model produced, before the data plane selects the requested ones and
formats them (classification, shared memory), so one entry serves requests for any subset of its
outputs.  Cached arrays are private copies marked read-only: nothing downstream can alter an entry.
Everything runs on the event loop, so there is no lock.
"""

from __future__ import annotations

import abc
import hashlib
import logging
import struct
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from naiad.core.errors import InvalidArgumentError
from naiad.core.request import InferRequest, InferResponse, Tensor
from naiad.scheduling.stats import SchedulerStats

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

log = logging.getLogger("naiad.cache")

#: Bookkeeping charged to each entry on top of its tensors (key, list, objects).
_ENTRY_OVERHEAD = 256
#: Charged per BYTES element on top of its length (the Python object holding it).
_OBJECT_OVERHEAD = 40
_LENGTH = struct.Struct("<Q")
_FORMAT = "<cache name>,<setting>=<value>"


@dataclass(frozen=True)
class CacheConfig:
    """One cache's ``--cache-config`` settings, in the order given (a later value of a setting wins)."""

    name: str
    settings: dict[str, str] = field(default_factory=dict)


def parse_cache_config(values: list[str]) -> CacheConfig | None:
    """The cache ``--cache-config`` values configure (``<cache>,<setting>=<value>``, repeated per
    setting); ``None``: no cache.  Refused as Triton refuses them: a value without a cache or a
    setting, several caches, a local cache without a size, a Redis cache without an address."""
    settings: dict[str, dict[str, str]] = {}
    for value in values:
        name, comma, rest = value.partition(",")
        if not comma or not name:
            raise ValueError(f"No cache specified. --cache-config option format is {_FORMAT}. Got {value}")
        key, equals, setting = rest.partition("=")
        if not equals or not key or not setting:
            raise ValueError(f"--cache-config option format is '{_FORMAT}'. Got {value}")
        settings.setdefault(name, {})[key] = setting
    if not settings:
        return None
    if len(settings) > 1:
        raise ValueError(
            "found multiple cache configurations, but only a single cache is currently supported"
        )
    [(name, chosen)] = settings.items()
    if name == "local":
        if not chosen.get("size", "").isdigit():
            raise ValueError("Failed to initialize LocalCache: config didn't contain a valid 'size' field.")
    elif name == "redis":
        if "host" not in chosen or "port" not in chosen:
            raise ValueError(
                "Failed to initialize RedisCache, didn't specify address. Must at a minimum specify 'host' "
                "and 'port' in the configuration, e.g. --cache-config redis,host=redis "
                "--cache-config redis,port=6379"
            )
    else:
        raise ValueError(f"unsupported cache '{name}': the 'local' and 'redis' caches are available")
    return CacheConfig(name, chosen)


class CacheInsertionError(Exception):
    """A response the cache did not keep, and why (logged; the request is answered all the same)."""


class ResponseCache(abc.ABC):
    """What both caches share: the key, the way a request is answered through the cache, and the
    counters of hits and misses (with the summed ``lookup_ns`` / ``insertion_ns``)."""

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0
        self.lookup_ns = 0
        self.insertion_ns = 0

    @staticmethod
    def key(request: InferRequest, model_name: str, version: int) -> bytes:
        """A 256-bit digest identifying what the model would be asked."""
        digest = hashlib.blake2b(digest_size=32)
        _field(digest, model_name.encode())
        digest.update(_LENGTH.pack(version))
        for tensor in sorted(request.inputs, key=lambda t: t.name):
            _field(digest, tensor.name.encode())
            _field(digest, tensor.datatype.encode())
            _field(digest, repr(tensor.data.shape).encode())
            for chunk in _tensor_bytes(tensor):
                _field(digest, chunk)
        _field(digest, repr(sorted(request.parameters.items())).encode())
        return digest.digest()

    async def answer(
        self,
        request: InferRequest,
        model_name: str,
        version: int,
        stats: SchedulerStats,
        submit: Callable[[InferRequest], Awaitable[InferResponse]],
    ) -> InferResponse:
        """The cached response to ``request``, else ``submit``'s, kept for the next one; counted in the
        version's ``stats`` as Triton counts hits and misses.  Clients' requests and ensemble steps
        both come through here, as in Triton, where a step's model answers from the cache too."""
        started = time.monotonic_ns()
        key = self.key(request, model_name, version)
        cached = await self.fetch(key, model_name, str(version))
        looked_up = time.monotonic_ns()
        self.lookup_ns += looked_up - started
        if cached is not None:
            self.hits += 1
            stats.cache_hit(looked_up - started)
            return cached
        self.misses += 1
        response = await submit(request)
        inserting = time.monotonic_ns()
        new = True
        try:
            new = await self.store(key, response)
        except CacheInsertionError as error:  # (Triton's words)
            log.error("Failed to insert key [%s] into response cache: %s", key.hex(), error)
        inserted = time.monotonic_ns()
        self.insertion_ns += inserted - inserting
        if new:  # (as Triton: a request whose twin ran at the same time and was kept first is no miss)
            stats.cache_miss(looked_up - started + inserted - inserting)
        return response

    @abc.abstractmethod
    async def fetch(self, key: bytes, model_name: str, version: str) -> InferResponse | None:
        """The entry under ``key`` as a response of that model version; ``None``: a miss."""

    @abc.abstractmethod
    async def store(self, key: bytes, response: InferResponse) -> bool:
        """Keep ``response`` under ``key``: False when an entry was there already (a request like it
        answered meanwhile); :class:`CacheInsertionError` says why it was not kept."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Let go of what the cache holds outside the process (connections)."""


class LocalCache(ResponseCache):
    """An LRU of responses in the server's memory, at most ``capacity`` bytes; with ``evictions``, its
    ``used`` bytes and its length, what Triton's local cache reports as ``nv_cache_*`` gauges."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.used = 0
        self.evictions = 0
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def fetch(self, key: bytes, model_name: str, version: str) -> InferResponse | None:
        return self.lookup(key, model_name, version)

    async def store(self, key: bytes, response: InferResponse) -> bool:
        return self.insert(key, response)

    async def close(self) -> None:
        pass  # (nothing outside the process)

    def lookup(self, key: bytes, model_name: str, version: str) -> InferResponse | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return InferResponse(
            model_name, version, outputs=list(entry.outputs), parameters=dict(entry.parameters)
        )

    def insert(self, key: bytes, response: InferResponse) -> bool:
        """Keep a private, read-only copy of ``response``; one larger than the cache is refused.
        False when the key has an entry already (kept as it is, as Triton's local cache keeps it)."""
        if key in self._entries:
            self._entries.move_to_end(key)
            return False
        outputs = [_frozen(tensor) for tensor in response.outputs]
        size = _ENTRY_OVERHEAD + len(key) + sum(_footprint(tensor) for tensor in outputs)
        if size > self.capacity:  # (the local cache's words)
            raise CacheInsertionError(
                f"Requested byte_size: {size} is greater than total cache size: {self.capacity}"
            )
        while self.used + size > self.capacity:
            _, evicted = self._entries.popitem(last=False)
            self.used -= evicted.size
            self.evictions += 1
        self._entries[key] = _Entry(outputs, dict(response.parameters), size)
        self.used += size
        return True


@dataclass(slots=True)
class _Entry:
    outputs: list[Tensor]
    parameters: dict[str, Any]
    size: int


class CacheUnavailable(Exception):
    """The configured cache cannot serve (Redis unreachable or refusing the credentials)."""


async def open_cache(config: CacheConfig | None) -> ResponseCache | None:
    """The cache ``config`` names, ready to serve (a Redis cache connected and answering); raises
    :class:`CacheUnavailable` with Triton's words when it cannot be."""
    if config is None:
        return None
    if config.name == "local":
        return LocalCache(int(config.settings["size"]))
    from naiad.scheduling.redis_cache import RedisCache  # (only a server that uses Redis imports it)

    return await RedisCache.connect(config.settings)


def _field(digest: Any, data: bytes | memoryview) -> None:
    """Length-prefixed, so that no two different sequences of fields hash the same bytes."""
    digest.update(_LENGTH.pack(len(data)))
    digest.update(data)


def _tensor_bytes(tensor: Tensor) -> list[bytes | memoryview]:
    data = tensor.data
    if tensor.datatype == "BYTES":
        return [item if isinstance(item, bytes) else str(item).encode() for item in data.reshape(-1)]
    if not data.flags.c_contiguous:
        data = np.ascontiguousarray(data)
    return [data.reshape(-1).view(np.uint8).data]


def _frozen(tensor: Tensor) -> Tensor:
    data = np.array(tensor.data, copy=True)
    data.flags.writeable = False
    return Tensor(tensor.name, tensor.datatype, data, dict(tensor.parameters))


def _footprint(tensor: Tensor) -> int:
    data = tensor.data
    if tensor.datatype != "BYTES":
        return int(data.nbytes)
    return sum(_OBJECT_OVERHEAD + len(item) for item in data.reshape(-1))


def refuse_uncacheable(config: mc.ModelConfig) -> None:
    """Triton's load-time refusals of the cache for models whose responses it cannot hold: a
    sequence's (each answer depends on the sequence's earlier requests) and a decoupled model's."""
    if not config.response_cache.enable:
        return
    if config.HasField("sequence_batching"):
        raise InvalidArgumentError(
            f"Response Cache does not currently support model {config.name} with sequence batching "
            "scheduler. Please disable the response cache."
        )
    if config.model_transaction_policy.decoupled:
        raise InvalidArgumentError(
            f"Response Cache does not currently support model {config.name} with 'decoupled' "
            "transaction policy. Please disable the response cache."
        )
