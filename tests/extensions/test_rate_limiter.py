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
from collections.abc import Iterator
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
from tests.support.models import write_model
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


def test_busy_instances_of_priorities_1_and_2_run_two_to_one_the_first_first() -> None:
    """Two instances that always have work (each asks again as it releases): the resource goes
    A A B A A B..., as in Triton 2.51 (qa/L0_rate_limiter's cross-model prioritization)."""
    limiter = RateLimiter([])
    config = mc.ModelConfig(name="m")
    for priority in (1, 1, 2):  # a holder, then A (priority 1) and B (priority 2), each needing the one slot
        group = config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
        group.rate_limiter.priority = priority
        group.rate_limiter.resources.add(name="slot", count=1)
    workers = [SimpleNamespace(gate=None) for _ in range(3)]
    limiter.attach(config, workers)  # type: ignore[arg-type]
    holder, a, b = (worker.gate for worker in workers)
    order: list[str] = []
    done = threading.Event()

    def busy(gate: Any, name: str) -> None:
        while not done.is_set():
            gate.acquire()
            order.append(name)
            if len(order) >= 12:
                done.set()
            gate.release(again=not done.is_set())

    holder.acquire()
    threads = [threading.Thread(target=busy, args=(gate, name)) for gate, name in ((a, "A"), (b, "B"))]
    for thread in threads:
        thread.start()
    while len(limiter._waiting) < 2:  # both wait before the slot frees
        time.sleep(0.001)
    holder.release()
    for thread in threads:
        thread.join(5)
    assert "".join(order[:12]) == "AAB" * 4


def test_a_request_made_on_release_is_taken_back_when_no_work_came() -> None:
    limiter = RateLimiter([("slot", 1, None)])
    first, second = _attach(limiter, "slot:1", "slot:1")
    first.acquire()
    first.release(again=True)  # granted at once: nobody else waits
    assert first.staged is not None and first.staged.granted
    waiting = threading.Thread(target=second.acquire)
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive()  # the slot is held for the request made on release
    first.withdraw()
    waiting.join(5)
    assert not waiting.is_alive() and first.staged is None


def test_the_first_waiter_that_does_not_fit_holds_the_others_back() -> None:
    """As in Triton: ``big`` (needs 4) waits at the head for what ``small_1`` holds, and ``small_2``
    (needs 2, which are free) waits behind it, so small instances cannot starve a big one."""
    limiter = RateLimiter([])
    big, small_1, small_2 = _attach(limiter, "r:4", "r:2", "r:2")
    small_1.acquire()
    waiters = [threading.Thread(target=big.acquire)]
    waiters[0].start()
    while len(limiter._waiting) < 1:
        time.sleep(0.001)
    waiters.append(threading.Thread(target=small_2.acquire))
    waiters[1].start()
    for waiter in waiters:
        waiter.join(0.2)
    assert all(waiter.is_alive() for waiter in waiters)
    small_1.release()
    waiters[0].join(5)
    assert not waiters[0].is_alive()  # big runs; small_2 still waits for it
    assert waiters[1].is_alive()
    big.release()
    waiters[1].join(5)
    assert not waiters[1].is_alive()


#: Holds the slot until the test creates ``release`` in its folder (it marks ``started`` first).
HOLDER_PY = """
import json, os, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.folder = json.loads(args["model_config"])["parameters"]["folder"]["string_value"]

    def execute(self, requests):
        open(os.path.join(self.folder, "started"), "w").close()
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(self.folder, "release")) and time.monotonic() < deadline:
            time.sleep(0.005)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.ones(1, np.int32))])
                for _ in requests]
"""

#: Answers each request with the number of requests its execution ran.
BATCH_SIZE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        size = np.array([[len(requests)]], np.int32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", size)]) for _ in requests]
"""


@pytest.fixture(scope="module")
def growing_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    """``holder`` and ``batched`` (dynamic batching, batches up to 4) need the one ``slot``."""
    root, folder = tmp_path_factory.mktemp("growing_models"), tmp_path_factory.mktemp("holder")
    slot = 'rate_limiter { resources [{ name: "slot" count: 1 }] }'
    write_model(root, "holder", f"""
        backend: "python"
        input [{{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }}]
        output [{{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }}]
        instance_group [{{ kind: KIND_CPU count: 1 {slot} }}]
        parameters {{ key: "folder" value {{ string_value: "{folder}" }} }}
        """, HOLDER_PY)  # fmt: skip
    write_model(root, "batched", f"""
        backend: "python"
        max_batch_size: 4
        input [{{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }}]
        output [{{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }}]
        instance_group [{{ kind: KIND_CPU count: 1 {slot} }}]
        dynamic_batching {{ }}
        """, BATCH_SIZE_PY)  # fmt: skip
    with ServerProcess([root], ["--rate-limit=execution_count"]) as server:
        yield server, folder


def _pending(server: ServerProcess, model: str) -> float:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics") as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("nv_inference_pending_request_count") and f'model="{model}"' in line:
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_batch_waiting_for_its_resources_takes_the_requests_queued_meanwhile(
    growing_server: tuple[ServerProcess, Path],
) -> None:
    """The first request finds ``batched``'s instance free and becomes a batch of one, which then
    waits for the slot ``holder`` holds; the three sent after it join that batch (Triton's payload
    takes requests until it is scheduled), so all four run in one execution, not 1 then 3."""
    server, folder = growing_server
    with ThreadPoolExecutor(max_workers=5) as pool:
        held = pool.submit(_run, server, "grpc", ["holder"])
        deadline = time.monotonic() + 20
        while not (folder / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        sizes = [pool.submit(_answer, server, "batched") for _ in range(4)]
        while _pending(server, "batched") < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        (folder / "release").touch()
        held.result(20)
        assert [size.result(20) for size in sizes] == [4, 4, 4, 4]


def _answer(server: ServerProcess, model: str) -> int:
    with client_for("grpc", server) as client:
        tensor = client.input("INPUT0", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.zeros((1, 1), np.int32))
        return int(client.client.infer(model, [tensor]).as_numpy("OUTPUT0")[0, 0])
