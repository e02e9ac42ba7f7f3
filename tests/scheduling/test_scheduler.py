"""The scheduler engine with fake instances: batching under load, priorities, ordering, concurrency,
cancellation, closing and the counters, without a server (events and barriers, no sleeps)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from naiad.backends.base import ExecuteResult
from naiad.core.errors import ErrorCode, InferenceServerError, InvalidArgumentError, UnavailableError
from naiad.core.request import InferRequest, InferResponse, Tensor
from naiad.scheduling.dynamic_batcher import DynamicBatchScheduler
from naiad.scheduling.factory import create_scheduler
from naiad.scheduling.policy import PriorityLevels, QueuePolicy, SchedulingPolicy, policy_of
from naiad.scheduling.stats import FailureReason
from naiad.scheduling.worker import InstanceWorker
from tritonclient.grpc import model_config_pb2 as mc

WAIT = 10.0  # generous: only a broken scheduler ever waits this long


class Instance:
    """Records each execution's request ids; the first execution can be held at a gate."""

    def __init__(self, gate: bool = False, barrier: threading.Barrier | None = None) -> None:
        self.batches: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        if not gate:
            self.release.set()
        self.barrier = barrier
        self.closed = False

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        self.batches.append([r.id for r in requests])
        self.entered.set()
        assert self.release.wait(WAIT)
        if self.barrier is not None:
            self.barrier.wait(WAIT)  # BrokenBarrierError unless N executions overlap
        results: list[ExecuteResult] = []
        for r in requests:
            if r.id.startswith("raise"):
                raise RuntimeError("the model broke")
            if r.id.startswith("bad"):
                results.append(InferenceServerError("bad request", ErrorCode.INVALID_ARG))
            else:
                results.append(InferResponse("m", "1", r.id))
        return results

    def close(self) -> None:
        self.closed = True


def request(name: str, batch: int = 1, priority: int = 0, timeout_us: int = 0) -> InferRequest:
    data = np.zeros((batch, 2), dtype=np.float32)
    return InferRequest(
        "m", id=name, inputs=[Tensor("x", "FP32", data)], priority=priority, timeout_us=timeout_us
    )


def batching(**overrides: Any) -> SchedulingPolicy:
    settings: dict[str, Any] = {"batching": True, "max_batch_size": 8}
    settings.update(overrides)
    return SchedulingPolicy("m", **settings)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), WAIT * 3))


async def close(scheduler: DynamicBatchScheduler) -> None:
    await asyncio.get_running_loop().run_in_executor(None, scheduler.close)


async def held(scheduler: DynamicBatchScheduler, instance: Instance) -> asyncio.Task[InferResponse]:
    """A first request that occupies ``instance`` until ``instance.release`` is set."""
    task = asyncio.create_task(scheduler.submit(request("gate")))
    assert await asyncio.to_thread(instance.entered.wait, WAIT)
    return task


async def queued(
    scheduler: DynamicBatchScheduler, *requests: InferRequest
) -> list[asyncio.Task[InferResponse]]:
    tasks = [asyncio.create_task(scheduler.submit(r)) for r in requests]
    await asyncio.sleep(0)  # each task runs up to its first await: it is queued
    return tasks


def test_batches_grow_while_the_instance_is_busy() -> None:
    async def test() -> None:
        instance = Instance(gate=True)
        scheduler = DynamicBatchScheduler(batching(), [InstanceWorker(instance, "i0")])
        gate = await held(scheduler, instance)
        tasks = await queued(scheduler, *(request(f"r{i}") for i in range(5)), request("big", batch=4))
        assert scheduler.stats.pending == 6
        instance.release.set()
        await asyncio.gather(gate, *tasks)
        # 5 + 4 > 8: the 4-row request waits for the next execution
        assert instance.batches == [["gate"], ["r0", "r1", "r2", "r3", "r4"], ["big"]]
        stats = scheduler.stats
        assert (stats.execution_count, stats.inference_count, stats.success_count) == (3, 10, 7)
        assert sorted(stats.batches) == [1, 4, 5] and stats.pending == 0
        await close(scheduler)
        assert instance.closed

    run(test)


def test_priorities_are_served_in_order_under_contention() -> None:
    async def test() -> None:
        instance = Instance(gate=True)
        policy = batching(max_batch_size=1, levels=PriorityLevels.of(QueuePolicy(), QueuePolicy()), default_level=1)
        scheduler = DynamicBatchScheduler(policy, [InstanceWorker(instance, "i0")])
        gate = await held(scheduler, instance)
        tasks = await queued(
            scheduler,
            request("low1", priority=2),
            request("default"),
            request("high1", priority=1),
            request("low2", priority=2),
            request("high2", priority=1),
            request("out of range", priority=9),
        )
        instance.release.set()
        await asyncio.gather(gate, *tasks)
        order = [batch[0] for batch in instance.batches[1:]]
        assert order == ["high1", "high2", "low1", "default", "low2", "out of range"]
        await close(scheduler)

    run(test)


def test_preserve_ordering_holds_later_responses_back() -> None:
    async def test() -> None:
        one, other = Instance(gate=True), Instance(gate=True)
        policy = SchedulingPolicy("m", levels=PriorityLevels.of(QueuePolicy(max_queue_size=10)), preserve_ordering=True)
        scheduler = DynamicBatchScheduler(policy, [InstanceWorker(one, "one"), InstanceWorker(other, "other")])
        first = asyncio.create_task(scheduler.submit(request("gate")))
        # whichever instance's thread was idle first takes it: that one is held, the other answers at once
        assert await asyncio.to_thread(lambda: _until(lambda: one.entered.is_set() or other.entered.is_set()))
        slow, fast = (one, other) if one.entered.is_set() else (other, one)
        fast.release.set()
        second = asyncio.create_task(scheduler.submit(request("second")))
        assert await asyncio.to_thread(lambda: _until(lambda: fast.batches == [["second"]]))
        await asyncio.sleep(0.05)
        assert not second.done()  # finished, but held back behind "gate"
        slow.release.set()
        await asyncio.gather(first, second)
        await close(scheduler)

    run(test)


def _until(condition: Callable[[], bool]) -> bool:
    event = threading.Event()
    for _ in range(int(WAIT / 0.01)):
        if condition():
            return True
        event.wait(0.01)
    return False


@pytest.mark.parametrize("with_batching", [False, True])
def test_count_n_instances_run_at_once(with_batching: bool) -> None:
    async def test() -> None:
        barrier = threading.Barrier(3)
        instances = [Instance(barrier=barrier) for _ in range(3)]
        policy = batching(max_batch_size=1) if with_batching else SchedulingPolicy("m")
        scheduler = DynamicBatchScheduler(
            policy, [InstanceWorker(i, f"i{n}") for n, i in enumerate(instances)]
        )
        # all three only return once all three are executing at the same time
        await asyncio.gather(*(scheduler.submit(request(f"r{i}")) for i in range(3)))
        assert sorted(len(i.batches) for i in instances) == [1, 1, 1]
        await close(scheduler)

    run(test)


@pytest.mark.parametrize("policy", [SchedulingPolicy("m"), batching(max_queue_delay_ns=10**9)])
def test_a_cancelled_request_never_reaches_the_instance(policy: SchedulingPolicy) -> None:
    async def test() -> None:
        instance = Instance(gate=True)
        scheduler = DynamicBatchScheduler(policy, [InstanceWorker(instance, "i0")])
        gate = await held(scheduler, instance) if not policy.batching else None
        if gate is None:  # the batcher waits out its delay: "gate" stays queued with the others
            gate = asyncio.create_task(scheduler.submit(request("gate")))
        doomed, kept = await queued(scheduler, request("doomed"), request("kept"))
        doomed.cancel()
        await asyncio.gather(doomed, return_exceptions=True)
        instance.release.set()
        await asyncio.gather(gate, kept)
        executed = [name for batch in instance.batches for name in batch]
        assert "doomed" not in executed and "kept" in executed
        assert scheduler.stats.failures[FailureReason.CANCELED] == 1
        assert scheduler.stats.pending == 0
        await close(scheduler)

    run(test)


def test_cancelling_a_running_request_is_visible_to_the_model() -> None:
    async def test() -> None:
        instance = Instance(gate=True)
        scheduler = DynamicBatchScheduler(SchedulingPolicy("m"), [InstanceWorker(instance, "i0")])
        core = request("running")
        task = asyncio.create_task(scheduler.submit(core))
        assert await asyncio.to_thread(instance.entered.wait, WAIT)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert core.cancelled
        instance.release.set()
        await close(scheduler)
        assert scheduler.stats.failures[FailureReason.CANCELED] == 1

    run(test)


def test_failures_stay_with_their_request_or_batch() -> None:
    async def test() -> None:
        instance = Instance(gate=True)
        scheduler = DynamicBatchScheduler(batching(), [InstanceWorker(instance, "i0")])
        gate = await held(scheduler, instance)
        tasks = await queued(scheduler, request("good"), request("bad"), request("fine"))
        instance.release.set()
        results = await asyncio.gather(gate, *tasks, return_exceptions=True)
        assert [type(r).__name__ for r in results] == [
            "InferResponse",
            "InferResponse",
            "InferenceServerError",
            "InferResponse",
        ]
        assert results[2].code is ErrorCode.INVALID_ARG  # type: ignore[union-attr]
        instance.release.clear()
        instance.entered.clear()
        gate = await held(scheduler, instance)
        tasks = await queued(scheduler, request("raise"), request("victim"))
        instance.release.set()
        results = await asyncio.gather(gate, *tasks, return_exceptions=True)
        assert isinstance(results[0], InferResponse)  # an earlier batch is unaffected
        for failed in results[1:]:
            assert isinstance(failed, InferenceServerError) and failed.code is ErrorCode.INTERNAL
            assert failed.message == "RuntimeError: the model broke"
        assert scheduler.stats.failures[FailureReason.BACKEND] == 3
        await close(scheduler)

    run(test)


def test_queue_policy_rejects_overflow_and_expired_requests() -> None:
    async def test() -> None:
        instance = Instance(gate=True)
        policy = batching(levels=PriorityLevels.of(QueuePolicy(default_timeout_us=50_000, max_queue_size=2)))
        scheduler = DynamicBatchScheduler(policy, [InstanceWorker(instance, "i0")])
        gate = await held(scheduler, instance)
        tasks = await queued(scheduler, request("a"), request("b"))
        with pytest.raises(UnavailableError, match=r"^Exceeds maximum queue size$"):
            await scheduler.submit(request("c"))
        for task in tasks:  # nobody releases the gate: both time out in the queue
            with pytest.raises(UnavailableError, match=r"^Request timeout expired$"):
                await task
        assert scheduler.stats.failures[FailureReason.REJECTED] == 3
        instance.release.set()
        await gate
        await close(scheduler)

    run(test)


def test_close_finishes_queued_work_then_refuses() -> None:
    async def test() -> None:
        instance = Instance(gate=True)
        scheduler = DynamicBatchScheduler(batching(max_batch_size=1), [InstanceWorker(instance, "i0")])
        gate = await held(scheduler, instance)
        tasks = await queued(scheduler, request("a"), request("b"))
        closing = asyncio.get_running_loop().run_in_executor(None, scheduler.close)
        await asyncio.sleep(0.05)
        with pytest.raises(UnavailableError, match="unloading"):
            await scheduler.submit(request("late"))
        instance.release.set()
        await asyncio.gather(gate, *tasks, closing)
        assert [b[0] for b in instance.batches] == ["gate", "a", "b"] and instance.closed

    run(test)


def test_a_scheduler_that_cannot_be_made_closes_its_workers() -> None:
    config = mc.ModelConfig(name="m", max_batch_size=4)
    state = config.sequence_batching.state.add(input_name="IN", output_name="OUT", data_type=mc.TYPE_FP32)
    state.initial_state.add(name="a", data_type=mc.TYPE_FP32, zero_data=True)
    state.initial_state.add(name="b", data_type=mc.TYPE_FP32, zero_data=True)  # (one at most)
    instance = Instance()
    with pytest.raises(InvalidArgumentError):
        create_scheduler(config, [InstanceWorker(instance, "i0")], Path("."))
    assert instance.closed  # the factory owns the workers it was given


def test_policy_from_config() -> None:
    config = mc.ModelConfig(name="m", max_batch_size=8)
    config.input.add(name="fixed", dims=[4])
    config.input.add(name="varying", dims=[-1])
    config.input.add(name="ragged", dims=[-1], allow_ragged_batch=True)
    dynamic = config.dynamic_batching
    dynamic.preferred_batch_size.extend([2, 4])
    dynamic.max_queue_delay_microseconds = 100
    dynamic.priority_levels = 3
    dynamic.default_priority_level = 2
    dynamic.priority_queue_policy[1].max_queue_size = 5
    dynamic.priority_queue_policy[1].timeout_action = mc.ModelQueuePolicy.DELAY
    policy = policy_of(config)
    assert policy.batching and policy.max_preferred_batch_size == 4 and policy.max_queue_delay_ns == 100_000
    assert policy.levels.count == 3
    assert policy.levels.policy(0) == QueuePolicy(delay_on_timeout=True, max_queue_size=5)
    assert policy.levels.policy(1) == policy.levels.policy(2) == QueuePolicy()
    assert [policy.level_of(p) for p in (0, 1, 3, 4)] == [1, 0, 2, 1]
    # Triton takes any number of levels a uint64 holds: they are not made one by one
    dynamic.priority_levels = 2**64 - 1
    dynamic.default_priority_level = 2**32
    dynamic.priority_queue_policy[2**63].max_queue_size = 1
    policy = policy_of(config)
    assert policy.levels.count == 2**64 - 1 and policy.default_level == 2**32 - 1
    assert policy.levels.policy(2**63 - 1) == QueuePolicy(max_queue_size=1)
    assert [policy.level_of(p) for p in (0, 2**64 - 1, 2**64)] == [2**32 - 1, 2**64 - 2, 2**32 - 1]
    assert policy.shape_inputs == frozenset({"varying"})
    assert not policy_of(mc.ModelConfig(name="m", max_batch_size=8)).batching
