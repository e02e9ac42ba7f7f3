"""The rate limiter: models whose instances need the same resource never execute at once.

Overlap is detected, not timed: each execution holds a lock file (``O_EXCL``) while it runs and
records an overlap when it finds the file taken.  The unlimited pair, made to meet at a barrier,
shows the detector does see executions that overlap.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from naiad.core.errors import InvalidArgumentError
from naiad.scheduling.rate_limiter import RateLimiter
from tritonclient.grpc import model_config_pb2 as mc

from tests.extensions.clients import client_for
from tests.support.server import ServerProcess


def _run(server: ServerProcess, protocol: str, models: list[str]) -> None:
    def infer(model: str) -> None:
        with client_for(protocol, server) as client:
            tensor = client.input("INPUT0", [1], "INT32")
            tensor.set_data_from_numpy(np.zeros(1, np.int32))
            client.client.infer(model, [tensor])

    with ThreadPoolExecutor(max_workers=len(models)) as pool:
        list(pool.map(infer, models))


def _overlaps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("overlap-"))


def test_models_sharing_a_resource_never_run_at_once(
    protocol: str, limiter_server: ServerProcess, lock_folders: dict[str, Path]
) -> None:
    _run(limiter_server, protocol, ["limited_a", "limited_b"] * 4)
    assert _overlaps(lock_folders["limited"]) == []


def test_models_without_resources_do_run_at_once(
    limiter_server: ServerProcess, lock_folders: dict[str, Path]
) -> None:
    _run(limiter_server, "grpc", ["free_c", "free_d"])
    assert _overlaps(lock_folders["free"])  # the detector sees real overlap


def test_an_instance_needing_more_than_exists_is_refused_at_load(limiter_server: ServerProcess) -> None:
    request = urllib.request.Request(f"http://{limiter_server.http_url}/v2/repository/index", data=b"{}")
    with urllib.request.urlopen(request) as answer:
        index = {entry["name"]: entry for entry in json.loads(answer.read())}
    assert index["greedy"].get("state") == "UNAVAILABLE"
    assert 'Resource count for "big" is limited to 2 which will prevent scheduling of one or more model ' \
           "instances, the minimum required count is 3" in index["greedy"]["reason"]


def _gates(priorities: list[int]) -> tuple[RateLimiter, list[Any]]:
    """A limiter with one ``slot`` and one single-instance group per priority, each needing it."""
    config = mc.ModelConfig(name="m")
    for priority in priorities:
        group = config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
        group.rate_limiter.priority = priority
        group.rate_limiter.resources.add(name="slot", count=1)
    limiter = RateLimiter([("slot", 1, None)])
    workers = [SimpleNamespace(gate=None) for _ in priorities]
    limiter.attach(config, workers)  # type: ignore[arg-type]
    return limiter, [worker.gate for worker in workers]


def test_freed_resources_go_to_the_instance_that_ran_least_for_its_priority() -> None:
    limiter, (holder, busy, idle) = _gates([1, 1, 2])
    busy.executions = 5  # ranks 5 x 1; idle ranks 0 x 2: idle goes first, then busy
    order: list[str] = []
    holder.acquire()

    def run(gate: Any, name: str) -> None:
        gate.acquire()
        order.append(name)
        gate.release()

    threads = [threading.Thread(target=run, args=(busy, "busy")), threading.Thread(target=run, args=(idle, "idle"))]
    for thread in threads:
        thread.start()
    while len(limiter._waiting) < 2:  # both wait for the slot before it frees
        time.sleep(0.001)
    holder.release()
    for thread in threads:
        thread.join(5)
    assert order == ["idle", "busy"]


def test_a_resource_no_flag_declares_is_sized_by_the_instances_loaded_now() -> None:
    """As in Triton: ``R`` has as many as the most demanding instance loaded needs, and shrinks back
    when that instance goes (an unload, or an instance update that removes it)."""

    def attach(limiter: RateLimiter, *counts: int) -> list[Any]:
        config = mc.ModelConfig(name="m")
        for count in counts:
            group = config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
            group.rate_limiter.resources.add(name="R", count=count)
        workers = [SimpleNamespace(gate=None) for _ in counts]
        limiter.attach(config, workers)  # type: ignore[arg-type]
        return [worker.gate for worker in workers]

    def runs_beside(holder: Any, other: Any) -> bool:
        """Whether ``other`` gets its resources while ``holder`` holds its own."""
        holder.acquire()
        granted = threading.Event()

        def take() -> None:
            other.acquire()
            granted.set()
            other.release()

        thread = threading.Thread(target=take)
        thread.start()
        beside = granted.wait(0.5)
        holder.release()
        thread.join(5)
        return beside

    limiter = RateLimiter([])
    first, second = attach(limiter, 2, 2)
    assert not runs_beside(first, second)  # R is 2: one at a time
    (large,) = attach(limiter, 4)
    assert runs_beside(first, second)  # R is 4 while the instance needing 4 is loaded
    large.retire()
    assert not runs_beside(first, second)  # ...and 2 again once it went


def _attach(limiter: RateLimiter, *resources: str) -> list[Any]:
    """One single-instance CPU group per resource text (``name:count`` or ``name:count:global``);
    the gates attached."""
    config = mc.ModelConfig(name="m")
    for text in resources:
        name, count, *scope = text.split(":")
        group = config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
        group.rate_limiter.resources.add(name=name, count=int(count), **{"global": scope == ["global"]})
    workers = [SimpleNamespace(gate=None) for _ in resources]
    limiter.attach(config, workers)  # type: ignore[arg-type]
    return [worker.gate for worker in workers]


# Triton 2.51's reasons for the same flags and configs (Python models, checked side by side).
@pytest.mark.parametrize(
    ("flags", "resources", "reason"),
    [
        # once a flag names some resource, one no flag names has none
        ([("big", 5, None)], ["gpu_slot:1"], 'Resource count for "gpu_slot" is limited to 0 which'),
        # a flag for another device gives CPU instances (device 0) none
        ([("r1", 10, 10)], ["r1:4"], 'Resource count for "r1" is limited to 0 which'),
        # a global resource gets the most any flag of its name gives, whatever its device
        ([("r2", 2, 0)], ["r2:3:global"], 'Resource count for "r2" is limited to 2 which'),
        # names are kept as written
        ([("R1", 4, None)], ["r1:4"], 'Resource count for "r1" is limited to 0 which'),
        # one name global for one instance and per device for another
        ([], ["r2:2:global", "r2:2"], 'Resource "r2" is present as both global and device-specific resource'),
    ],
)
def test_flags_and_needs_that_could_never_schedule_fail_the_load(
    flags: list[tuple[str, int, int | None]], resources: list[str], reason: str
) -> None:
    limiter = RateLimiter(flags)
    with pytest.raises(InvalidArgumentError) as refused:
        _attach(limiter, *resources)
    assert str(refused.value).startswith(reason)
    assert limiter._gates == set()  # nothing of the refused version stays counted


def test_a_conflict_with_a_loaded_model_fails_only_the_new_one() -> None:
    limiter = RateLimiter([])
    (loaded,) = _attach(limiter, "r2:2")
    with pytest.raises(InvalidArgumentError, match='Resource "r2" is present as both global'):
        _attach(limiter, "r2:2:global")
    assert limiter._gates == {loaded}
    loaded.retire()
    _attach(limiter, "r2:2:global")  # once the per-device one went, the global one loads


def test_flags_size_what_they_name() -> None:
    """``r2:1:0`` and ``r2:3:1`` give a global ``r2`` three: three one-unit instances run at once,
    a fourth waits; ``slot:2`` (every device) beside ``slot:1:0`` gives device 0 two."""
    limiter = RateLimiter([("r2", 1, 0), ("r2", 3, 1), ("slot", 2, None), ("slot", 1, 0)])
    gates = _attach(limiter, "r2:1:global", "r2:1:global", "r2:1:global", "r2:1:global", "slot:1", "slot:1")
    assert limiter._total == {("r2", None): 3, ("slot", 0): 2}
    for gate in gates[:3]:
        gate.acquire()
    waiting = threading.Thread(target=gates[3].acquire)
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive()  # the fourth waits for one of the three
    gates[0].release()
    waiting.join(5)
    assert not waiting.is_alive()
