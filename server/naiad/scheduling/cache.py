"""The response cache (``--cache-config local,size=N``, ``response_cache { enable: true }``).

One least-recently-used cache for the server, bounded in bytes, holds whole model responses keyed by
a digest of the model name, the version, every input (name, datatype, shape, bytes) and the request
parameters.  The model name and version are in the key, so models never see each other's entries;
the parameters are too (beyond Triton, whose key ignores them), because a custom parameter may change
what a model answers.  A hit answers without the queue or the model.

Entries hold every output the model produced, before the data plane selects the requested ones and
formats them (classification, shared memory), so one entry serves requests for any subset of its
outputs.  Cached arrays are private copies marked read-only: nothing downstream can alter an entry.
Everything runs on the event loop, so there is no lock.
"""

from __future__ import annotations

import hashlib
import struct
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from naiad.core.errors import InvalidArgumentError
from naiad.core.request import InferRequest, InferResponse, Tensor
from naiad.scheduling.stats import SchedulerStats

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

#: Bookkeeping charged to each entry on top of its tensors (key, list, objects).
_ENTRY_OVERHEAD = 256
#: Charged per BYTES element on top of its length (the Python object holding it).
_OBJECT_OVERHEAD = 40
_LENGTH = struct.Struct("<Q")


def parse_cache_config(settings: list[str]) -> int | None:
    """The cache size in bytes from ``--cache-config`` values (``local,size=N``); ``None``: no cache."""
    size: int | None = None
    for setting in settings:
        name, _, rest = setting.partition(",")
        key, _, value = rest.partition("=")
        if name != "local":
            raise ValueError(f"unsupported cache '{name}': only the 'local' cache is available")
        if key != "size" or not value.isdigit():
            raise ValueError(f"expected --cache-config=local,size=<bytes>, got '{setting}'")
        size = int(value)
    return size


@dataclass(slots=True)
class _Entry:
    outputs: list[Tensor]
    parameters: dict[str, Any]
    size: int


class ResponseCache:
    """An LRU of responses, at most ``capacity`` bytes; counters for Triton's ``nv_cache_*`` gauges
    (``hits``, ``misses``, ``evictions``, and the summed ``lookup_ns`` / ``insertion_ns``)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.evictions = 0
        self.hits = 0
        self.misses = 0
        self.lookup_ns = 0
        self.insertion_ns = 0
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

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
        cached = self.lookup(key, model_name, str(version))
        looked_up = time.monotonic_ns()
        self.lookup_ns += looked_up - started
        if cached is not None:
            self.hits += 1
            stats.cache_hit(looked_up - started)
            return cached
        self.misses += 1
        response = await submit(request)
        inserting = time.monotonic_ns()
        self.insert(key, response)
        inserted = time.monotonic_ns()
        self.insertion_ns += inserted - inserting
        stats.cache_miss(looked_up - started + inserted - inserting)
        return response

    def lookup(self, key: bytes, model_name: str, version: str) -> InferResponse | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return InferResponse(
            model_name, version, outputs=list(entry.outputs), parameters=dict(entry.parameters)
        )

    def insert(self, key: bytes, response: InferResponse) -> None:
        """Keep a private, read-only copy of ``response``; one larger than the cache is not kept."""
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        outputs = [_frozen(tensor) for tensor in response.outputs]
        size = _ENTRY_OVERHEAD + len(key) + sum(_footprint(tensor) for tensor in outputs)
        if size > self.capacity:
            return
        while self.used + size > self.capacity:
            _, evicted = self._entries.popitem(last=False)
            self.used -= evicted.size
            self.evictions += 1
        self._entries[key] = _Entry(outputs, dict(response.parameters), size)
        self.used += size


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


def refuse_decoupled(config: mc.ModelConfig) -> None:
    """Triton's load-time refusal: a decoupled model's responses cannot be cached."""
    if config.response_cache.enable and config.model_transaction_policy.decoupled:
        raise InvalidArgumentError(
            f"Response Cache does not currently support model {config.name} with 'decoupled' "
            "transaction policy. Please disable the response cache."
        )
