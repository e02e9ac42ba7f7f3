"""The response cache on its own: its byte bound, least-recently-used eviction, private read-only
entries, and keys that tell apart everything a model could answer differently for."""

from __future__ import annotations

import numpy as np
import pytest
from naiad.core.request import InferRequest, InferResponse, Tensor
from naiad.scheduling.cache import (
    CacheConfig,
    CacheInsertionError,
    LocalCache,
    ResponseCache,
    parse_cache_config,
)


def _request(value: int, model: str = "m", parameters: dict[str, int] | None = None) -> InferRequest:
    data = np.full(4, value, dtype=np.int32)
    return InferRequest(model, inputs=[Tensor("INPUT0", "INT32", data)], parameters=parameters or {})


def _response(size: int) -> InferResponse:
    return InferResponse("m", "1", outputs=[Tensor("OUTPUT0", "UINT8", np.zeros(size, np.uint8))])


def test_the_byte_bound_evicts_the_least_recently_used() -> None:
    cache = LocalCache(3000)
    keys = [ResponseCache.key(_request(i), "m", 1) for i in range(3)]
    for key in keys[:2]:
        cache.insert(key, _response(1000))
    assert cache.lookup(keys[0], "m", "1") is not None  # keys[0] is now the most recent
    cache.insert(keys[2], _response(1000))
    assert cache.used <= cache.capacity
    assert cache.lookup(keys[1], "m", "1") is None
    assert cache.lookup(keys[0], "m", "1") is not None
    assert cache.evictions == 1
    with pytest.raises(CacheInsertionError, match=r"^Requested byte_size: \d+ is greater than total cache size: 3000$"):
        cache.insert(ResponseCache.key(_request(9), "m", 1), _response(5000))  # larger than the cache
    assert len(cache) == 2


def test_entries_are_private_and_read_only() -> None:
    cache = LocalCache(10_000)
    key = ResponseCache.key(_request(1), "m", 1)
    response = _response(8)
    cache.insert(key, response)
    response.outputs[0].data[:] = 7
    cached = cache.lookup(key, "m", "1")
    assert cached is not None
    assert not cached.outputs[0].data.any()
    with pytest.raises(ValueError):
        cached.outputs[0].data[0] = 1


def test_keys_differ_by_model_version_inputs_and_parameters() -> None:
    base = ResponseCache.key(_request(1), "m", 1)
    assert base == ResponseCache.key(_request(1), "m", 1)
    assert base != ResponseCache.key(_request(1), "other", 1)
    assert base != ResponseCache.key(_request(1), "m", 2)
    assert base != ResponseCache.key(_request(2), "m", 1)
    assert base != ResponseCache.key(_request(1, parameters={"p": 1}), "m", 1)


def test_cache_config_flag() -> None:
    """Triton's ``<cache>,<setting>=<value>`` values, one cache, refused in its words."""
    assert parse_cache_config([]) is None
    assert parse_cache_config(["local,size=1048576"]) == CacheConfig("local", {"size": "1048576"})
    redis = parse_cache_config(["redis,host=r", "redis,port=6379", "redis,password=a=b"])
    assert redis == CacheConfig("redis", {"host": "r", "port": "6379", "password": "a=b"})
    refusals = {
        "local": "No cache specified. --cache-config option format is <cache name>,<setting>=<value>. Got local",
        "local,size": "--cache-config option format is '<cache name>,<setting>=<value>'. Got local,size",
        "local,size=": "--cache-config option format is '<cache name>,<setting>=<value>'. Got local,size=",
        "local,size=lots": "Failed to initialize LocalCache: config didn't contain a valid 'size' field.",
        "redis,host=x": "Failed to initialize RedisCache, didn't specify address. Must at a minimum specify "
                        "'host' and 'port'",
        "memcached,size=1": "unsupported cache 'memcached'",
    }
    for bad, message in refusals.items():
        with pytest.raises(ValueError) as refused:
            parse_cache_config([bad])
        assert str(refused.value).startswith(message)
    with pytest.raises(ValueError, match=r"^found multiple cache configurations, but only a single cache is currently supported$"):
        parse_cache_config(["local,size=8192", "redis,key=value"])
