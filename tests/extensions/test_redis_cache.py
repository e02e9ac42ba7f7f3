"""The Redis response cache against a real Redis: servers that name the same Redis answer from what
any of them computed (the model of the second never runs), through both protocols and both server
modes; Redis going away costs the cache, never a request; a Redis that cannot be reached or refuses
the credentials stops the start, in Triton's words, and Triton's settings and variables for the
credentials work unchanged."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.extensions.clients import client_for
from tests.extensions.conftest import COUNTING_CONFIG, COUNTING_PY
from tests.support import modes
from tests.support.models import write_model
from tests.support.redis_server import RedisServer
from tests.support.server import ServerProcess


def _redis_flags(redis: RedisServer, *extra: str) -> list[str]:
    return ["--cache-config=redis,host=127.0.0.1", f"--cache-config=redis,port={redis.port}",
            *(f"--cache-config=redis,{setting}" for setting in extra)]  # fmt: skip


def _infer(protocol: str, server: ServerProcess, data: np.ndarray, outputs: tuple[str, ...]) -> dict[str, Any]:
    with client_for(protocol, server) as client:
        tensor = client.input("INPUT0", list(data.shape), "INT32")
        tensor.set_data_from_numpy(data)
        result = client.client.infer("counting", [tensor], outputs=[client.output(name) for name in outputs])
        return {name: result.as_numpy(name) for name in outputs}


def _stats(server: ServerProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/counting/stats") as answer:
        document: dict[str, Any] = json.loads(answer.read())
    stats: dict[str, Any] = document["model_stats"][0]
    return {"executions": stats["execution_count"],
            **{k: stats["inference_stats"][k]["count"] for k in ("success", "cache_hit", "cache_miss")}}  # fmt: skip


def _metrics(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics") as answer:
        return str(answer.read().decode())


def test_servers_share_one_redis_and_requests_survive_it(tmp_path: Path) -> None:
    write_model(tmp_path, "counting", COUNTING_CONFIG, COUNTING_PY)
    data = np.array([3, 1, 4, 1, 5], dtype=np.int32)
    with RedisServer() as redis:
        flags = _redis_flags(redis)
        with ServerProcess([tmp_path], flags, frontend_workers=modes.WORKERS) as first, \
                ServerProcess([tmp_path], flags) as second:  # fmt: skip
            computed = _infer("grpc", first, data, ("OUTPUT0", "WHO"))
            assert _stats(first) == {"executions": 1, "success": 1, "cache_hit": 0, "cache_miss": 1}
            assert [key.decode()[:9] for key in redis.client().keys("*")] == ["naiad:v1:"]

            # the second server answers from what the first computed: its model never runs
            both = _infer("http", second, data, ("OUTPUT0", "WHO"))
            only_who = _infer("grpc", second, data, ("WHO",))
            assert both["OUTPUT0"].tolist() == (data * 2).tolist()
            assert both["WHO"].tolist() == only_who["WHO"].tolist() == computed["WHO"].tolist()
            assert _stats(second) == {"executions": 0, "success": 2, "cache_hit": 2, "cache_miss": 0}
            again = _infer("http", first, data, ("WHO",))  # and the first from its own entry
            assert again["WHO"].tolist() == computed["WHO"].tolist()

            # per-model counters as with the local cache; Triton's Redis cache reports no nv_cache_* gauges
            text = _metrics(second)
            assert 'nv_cache_num_hits_per_model{model="counting",version="1"} 2\n' in text
            assert "nv_cache_num_entries" not in text and "nv_cache_util" not in text

            redis.stop()  # Redis goes away: the requests are answered by the model
            other = np.array([2, 7, 1, 8], dtype=np.int32)
            for server in (first, second):
                for values in (data, other):
                    answer = _infer("http", server, values, ("OUTPUT0", "WHO"))
                    assert answer["OUTPUT0"].tolist() == (values * 2).tolist()
            assert _stats(second)["executions"] == 2
            assert second.logged("] into response cache: Failed to insert key: ")
            assert "Failed to insert key [" in second.log()


def _start_refused(repository: Path, args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    server = ServerProcess([repository], ["--model-control-mode=explicit", *args], env=env)
    with pytest.raises(RuntimeError) as failed:
        server.start()
    assert server.process is not None
    return int(server.process.returncode), str(failed.value)


def test_credentials_as_triton_takes_them(tmp_path: Path) -> None:
    with RedisServer(password="redis123!") as redis:
        explicit = ["--model-control-mode=explicit"]
        for args, env in (
            (_redis_flags(redis, "password=redis123!"), None),
            (_redis_flags(redis), {"TRITONCACHE_REDIS_PASSWORD": "redis123!"}),
            (_redis_flags(redis), {"TRITONCACHE_REDIS_USERNAME": "default", "TRITONCACHE_REDIS_PASSWORD": "redis123!"}),
        ):
            with ServerProcess([tmp_path], explicit + args, env=env) as server:
                assert "Failed to initialize RedisCache" not in server.log()
        status, log = _start_refused(tmp_path, _redis_flags(redis, "password=wrong"))
        assert status == 1
        assert "creating server: Internal - Failed to initialize RedisCache: WRONGPASS invalid " \
               "username-password pair or user is disabled." in log
        status, log = _start_refused(tmp_path, _redis_flags(redis), {"TRITONCACHE_REDIS_PASSWORD": "wrong"})
        assert "WRONGPASS" in log
        status, log = _start_refused(tmp_path, _redis_flags(redis))
        assert status == 1
        assert "Failed to initialize RedisCache: NOAUTH Authentication required." in log


def test_a_redis_out_of_reach_stops_the_start(tmp_path: Path) -> None:
    args = ["--cache-config=redis,host=127.0.0.1", "--cache-config=redis,port=nonexistent"]
    status, log = _start_refused(tmp_path, args)
    assert status == 1
    assert "Failed to initialize RedisCache: failed to connect to Redis (127.0.0.1:0): Connection refused" in log
    status, log = _start_refused(tmp_path, ["--cache-config=redis,port=6379"])
    assert status == 2
    assert "Must at a minimum specify 'host' and 'port'" in log
    status, log = _start_refused(tmp_path, ["--cache-config=local,size=8192", "--cache-config=redis,key=value"])
    assert "found multiple cache configurations, but only a single cache is currently supported" in log
