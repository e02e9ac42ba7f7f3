"""The sequence batcher with fake instances: direct batches put each sequence at its slot's position
and fill the gaps with null requests; oldest batches answer in the order they were received.

No server and no sleeps: a fake instance records every request it executes and can hold its first
execution until the test has queued what it needs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from naiad.backends.base import ExecuteResult
from naiad.core.errors import CancelledError, InvalidArgumentError
from naiad.core.request import InferRequest, InferResponse, Tensor
from naiad.scheduling.queue import QueuedRequest
from naiad.scheduling.sequence_batcher import SequenceBatchScheduler
from naiad.scheduling.sequence_settings import sequence_settings_of
from naiad.scheduling.start_delay import StartDelay
from naiad.scheduling.stats import FailureReason
from naiad.scheduling.worker import Execution, InstanceWorker, Jobs
from tritonclient.grpc import model_config_pb2 as mc

WAIT = 10.0  # generous: only a broken scheduler ever waits this long

CONTROLS = """
control_input [
  { name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }] },
  { name: "END" control [{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }] },
  { name: "READY" control [{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }] },
  { name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }] }
]
state [{
  input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ]
  initial_state { name: "zero" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true }
}]
"""

#: What the model saw at one batch position: its inputs by name (first element of each).
Seen = dict[str, object]


class Recorder:
    """A stateful model: OUTPUT = STATE_OUT = STATE_IN + INPUT for a ready request; a request that
    is not ready gets a state output no sequence may ever see.  A request whose id starts with
    ``hold`` blocks its execution until :attr:`release` is set."""

    def __init__(self) -> None:
        self.batches: list[list[Seen]] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        self.batches.append([{t.name: t.data.reshape(-1)[0] for t in r.inputs} for r in requests])
        if any(r.id.startswith("hold") for r in requests):
            self.entered.set()
            assert self.release.wait(WAIT)
        results: list[ExecuteResult] = []
        for r in requests:
            inputs = {t.name: t.data for t in r.inputs}
            ready = "READY" not in inputs or bool(inputs["READY"].all())
            total = inputs["STATE_IN"] + inputs["INPUT"] if ready else np.full_like(inputs["INPUT"], -999)
            outputs = [Tensor("OUTPUT", "INT32", total), Tensor("STATE_OUT", "INT32", total)]
            results.append(InferResponse("m", "1", r.id, outputs))
        return results

    def close(self) -> None:
        pass


def scheduler(config_text: str, instance: Recorder) -> SequenceBatchScheduler:
    config = text_format.Parse(config_text, mc.ModelConfig())
    return SequenceBatchScheduler(sequence_settings_of(config, Path(".")), [InstanceWorker(instance, "i0")])


def direct(extra: str = "") -> str:
    return f'name: "m" max_batch_size: 4 sequence_batching {{ direct {{ }} {CONTROLS} {extra} }}'


def request(
    name: str, sequence: int | str, value: int, start: bool = False, end: bool = False
) -> InferRequest:
    data = np.full((1, 1), value, dtype=np.int32)
    return InferRequest(
        "m",
        id=name,
        inputs=[Tensor("INPUT", "INT32", data)],
        sequence_id=sequence,
        sequence_start=start,
        sequence_end=end,
    )


def total(response: InferResponse) -> int:
    assert [o.name for o in response.outputs] == ["OUTPUT"]  # the state output stays inside
    return int(response.outputs[0].data.reshape(-1)[0])


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), WAIT * 3))


async def close(scheduler: SequenceBatchScheduler) -> None:
    await asyncio.get_running_loop().run_in_executor(None, scheduler.close)


def positions(batch: list[Seen]) -> list[tuple[object, ...]]:
    """(READY, CORRID, STATE_IN, INPUT) at each position of a batch."""
    return [(int(s["READY"]), int(s["CORRID"]), int(s["STATE_IN"]), int(s["INPUT"])) for s in batch]


def test_direct_keeps_each_sequence_at_its_slot_and_fills_gaps_with_null_requests() -> None:
    async def test() -> None:
        instance = Recorder()
        instance.release.set()
        batcher = scheduler(direct(), instance)
        assert total(await batcher.submit(request("a1", 11, 1, start=True))) == 1  # slot 0
        assert total(await batcher.submit(request("b1", 12, 10, start=True))) == 10  # slot 1
        assert total(await batcher.submit(request("c1", 13, 100, start=True))) == 100  # slot 2
        assert total(await batcher.submit(request("a2", 11, 2, end=True))) == 3  # frees slot 0
        assert total(await batcher.submit(request("d1", 14, 1000, start=True))) == 1000  # takes slot 0
        assert total(await batcher.submit(request("b2", 12, 20))) == 30  # the null requests' state is lost
        assert positions(instance.batches[1]) == [(0, 0, 0, 0), (1, 12, 0, 10)]
        assert positions(instance.batches[2]) == [(0, 0, 0, 0), (0, 0, 0, 0), (1, 13, 0, 100)]
        assert positions(instance.batches[3]) == [(1, 11, 1, 2)]  # slot 0 first: no null request
        assert positions(instance.batches[4]) == [(1, 14, 0, 1000)]
        assert positions(instance.batches[5]) == [(0, 0, 0, 0), (1, 12, 10, 20)]
        nulls = [s for batch in instance.batches for s in batch if not s["READY"]]
        assert len(nulls) == 4 and all(s["START"] == s["END"] == 0 for s in nulls)

        # While slot 0's sequence runs, slots 1 and 2 queue up: one batch with a null request at 0.
        instance.release.clear()
        held = asyncio.create_task(batcher.submit(request("hold-d2", 14, 1)))
        assert await asyncio.to_thread(instance.entered.wait, WAIT)
        tasks = [
            asyncio.create_task(batcher.submit(request("b3", 12, 5))),
            asyncio.create_task(batcher.submit(request("c2", 13, 7, end=True))),
        ]
        await asyncio.sleep(0)  # both are queued
        assert batcher.stats.pending == 2
        instance.release.set()
        answers = await asyncio.gather(held, *tasks)
        assert [total(a) for a in answers] == [1001, 35, 107]
        assert positions(instance.batches[-1]) == [(0, 0, 0, 0), (1, 12, 30, 5), (1, 13, 100, 7)]

        stats = batcher.stats
        assert (stats.success_count, stats.failure_count) == (9, 0)
        # as in Triton: null requests count in their execution's batch size, never as inferences
        assert (stats.execution_count, stats.inference_count) == (8, 9)
        assert {size: batch.count for size, batch in stats.batches.items()} == {1: 4, 2: 2, 3: 2}
        await close(batcher)

    run(test)


def test_null_requests_take_empty_strings_for_bytes() -> None:
    """A BYTES input and a string CORRID: the null request has empty strings where zeros would be."""
    config = """
    name: "m" max_batch_size: 2
    sequence_batching { direct { } control_input [
      { name: "READY" control [{ kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] }] },
      { name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING }] } ] }
    """

    class Texts:
        def __init__(self) -> None:
            self.batches: list[list[dict[str, np.ndarray]]] = []

        def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
            self.batches.append([{t.name: t.data for t in r.inputs} for r in requests])
            return [InferResponse("m", "1", r.id, [r.inputs[0]]) for r in requests]

        def close(self) -> None:
            pass

    def text(sequence: str, start: bool = False) -> InferRequest:
        data = np.array([[sequence.encode()]], dtype=np.object_)
        return InferRequest(
            "m", inputs=[Tensor("TEXT", "BYTES", data)], sequence_id=sequence, sequence_start=start
        )

    async def test() -> None:
        instance = Texts()
        config_proto = text_format.Parse(config, mc.ModelConfig())
        settings = sequence_settings_of(config_proto, Path("."))
        batcher = SequenceBatchScheduler(settings, [InstanceWorker(instance, "i0")])
        await batcher.submit(text("left", start=True))
        await batcher.submit(text("right", start=True))
        null, real = instance.batches[-1]
        assert real["CORRID"].tolist() == [[b"right"]] and real["READY"].tolist() == [[True]]
        assert null["CORRID"].tolist() == [[b""]] and null["TEXT"].tolist() == [[b""]]
        assert null["READY"].tolist() == [[False]]
        assert {name: (a.dtype, a.shape) for name, a in null.items()} == {
            name: (a.dtype, a.shape) for name, a in real.items()
        }
        await close(batcher)

    run(test)


def test_a_positional_execution_keeps_its_cancelled_requests() -> None:
    """The worker drops cancelled requests from an ordinary batch, but not from a direct one, where
    removing one would move the requests after it to another sequence's slot."""
    seen: list[list[str]] = []

    class Model:
        def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
            seen.append([r.id + ("!" if r.cancelled else "") for r in requests])
            return [InferResponse("m", "1", r.id) for r in requests]

        def close(self) -> None:
            pass

    async def test() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Queue[Execution] = asyncio.Queue()
        worker = InstanceWorker(Model(), "i0")
        jobs = Jobs()
        worker.start(jobs, lambda execution: loop.call_soon_threadsafe(done.put_nowait, execution))
        for keep in (False, True):
            entries = [QueuedRequest(InferRequest("m", id=name), loop.create_future(), 0) for name in "abc"]
            entries[1].request.cancelled = True
            jobs.put(Execution(entries, 0, 0, keep_cancelled=keep))
            execution = await done.get()
            assert len(execution.skipped) == (0 if keep else 1)
        jobs.put(None)
        await asyncio.to_thread(worker.join, WAIT)
        assert seen == [["a", "c"], ["a", "b!", "c"]]

    run(test)


def test_oldest_answers_in_the_order_requests_were_received() -> None:
    """``preserve_ordering``: an instance runs one batch at a time and answers it in batch order, so
    requests queued behind a busy instance are answered in the order they arrived, two per batch."""
    config = """
    name: "m" max_batch_size: 2
    sequence_batching {
      oldest { max_candidate_sequences: 8 preserve_ordering: true }
      control_input [
        { name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }] } ]
      state [{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] }]
    }
    """

    async def test() -> None:
        instance = Recorder()
        batcher = scheduler(config, instance)
        answered: list[str] = []

        async def send(name: str, sequence: int, start: bool = False) -> None:
            await batcher.submit(request(name, sequence, 1, start=start))
            answered.append(name)

        held = asyncio.create_task(send("hold", 9, start=True))
        assert await asyncio.to_thread(instance.entered.wait, WAIT)
        order = [("1a", 1, True), ("2a", 2, True), ("3a", 3, True), ("4a", 4, True), ("1b", 1, False)]
        order += [("2b", 2, False)]
        tasks = [asyncio.create_task(send(name, sequence, start)) for name, sequence, start in order]
        await asyncio.sleep(0)
        assert batcher.stats.pending == len(order)
        instance.release.set()
        await asyncio.gather(held, *tasks)
        assert answered == ["hold"] + [name for name, _, _ in order]
        corrids = [[int(s["CORRID"]) for s in batch] for batch in instance.batches]
        assert corrids == [[9], [1, 2], [3, 4], [1, 2]]  # no null requests in an oldest batch
        await close(batcher)

    run(test)


def test_cancelling_a_waiting_request_ends_its_whole_sequence() -> None:
    """As in Triton: a request cancelled while it waits for its turn, or for a slot in the backlog,
    cancels every request of its sequence still waiting (each counted CANCELED); the request running
    finishes, then the slot goes to the backlog; the ID needs START again."""
    config = f'name: "m" max_batch_size: 1 sequence_batching {{ direct {{ }} {CONTROLS} }}'

    async def test() -> None:
        instance = Recorder()
        batcher = scheduler(config, instance)  # one slot
        running = asyncio.create_task(batcher.submit(request("hold-a1", 1, 1, start=True)))
        assert await asyncio.to_thread(instance.entered.wait, WAIT)
        queued = [asyncio.create_task(batcher.submit(request(f"a{n}", 1, n))) for n in (2, 3)]
        backlog = [asyncio.create_task(batcher.submit(request("b1", 2, 10, start=True)))]
        backlog.append(asyncio.create_task(batcher.submit(request("b2", 2, 20))))
        await asyncio.sleep(0)
        assert batcher.stats.pending == 4

        backlog[1].cancel()  # a backlogged sequence: both its requests go
        await asyncio.wait(backlog, timeout=WAIT)
        assert backlog[1].cancelled()
        with pytest.raises(CancelledError, match="Request was cancelled"):
            await backlog[0]
        queued[0].cancel()  # a sequence holding the slot: its waiting requests go, the running one stays
        await asyncio.wait(queued, timeout=WAIT)
        assert queued[0].cancelled()
        assert str(queued[1].exception()) == "Request was cancelled"
        assert batcher.stats.pending == 0
        assert batcher.stats.failures[FailureReason.CANCELED] == 4

        late = asyncio.create_task(batcher.submit(request("c1", 3, 100, start=True)))  # waits for the slot
        instance.release.set()
        assert total(await running) == 1
        assert total(await late) == 100  # the cancelled sequence freed its slot
        with pytest.raises(InvalidArgumentError, match="must specify the START flag"):
            await batcher.submit(request("a4", 1, 4))
        assert [int(s["CORRID"]) for batch in instance.batches for s in batch] == [1, 3]
        await close(batcher)

    run(test)


def test_a_sequence_idle_since_its_last_request_came_ends_even_while_it_runs() -> None:
    """Triton counts a sequence's idle time from its latest request's arrival: a request that runs
    past ``max_sequence_idle_microseconds`` still answers (and so does the one queued behind it), but
    its sequence is forgotten, so the next request of its ID needs START; its slot frees after the run."""

    async def test() -> None:
        instance = Recorder()
        batcher = scheduler(direct("max_sequence_idle_microseconds: 200000"), instance)
        running = asyncio.create_task(batcher.submit(request("hold-a1", 11, 1, start=True)))
        assert await asyncio.to_thread(instance.entered.wait, WAIT)
        queued = asyncio.create_task(batcher.submit(request("a2", 11, 2)))
        await asyncio.sleep(0.5)  # past the idle time since a2 came, while a1 runs
        instance.release.set()
        assert [total(await running), total(await queued)] == [1, 3]
        with pytest.raises(InvalidArgumentError) as error:
            await batcher.submit(request("a3", 11, 3))
        assert str(error.value) == (
            "inference request for sequence 11 to model 'm' must specify the START flag on the first request "
            "of the sequence"
        )
        assert total(await batcher.submit(request("b1", 12, 10, start=True))) == 10
        assert positions(instance.batches[-1]) == [(1, 12, 0, 10)]  # slot 0 again: a's slot was freed
        await close(batcher)

    run(test)


def test_direct_batches_requests_of_equal_shapes_only() -> None:
    """A variable-size input that is not ragged: the lowest slot's request decides the batch's shape,
    and a slot whose request differs gets a null request until a later batch (Triton's rule).  The
    four sequences are held until all are queued (Triton's start delay), one per slot."""
    config = f"""
    name: "m" max_batch_size: 4 input [{{ name: "INPUT" data_type: TYPE_INT32 dims: [ -1 ] }}]
    sequence_batching {{ direct {{ }} {CONTROLS} }}
    """
    widths = {10: 2, 11: 1, 12: 2, 13: 3}  # slots 0-3

    def shaped(sequence: int) -> InferRequest:
        data = np.full((1, widths[sequence]), 1, dtype=np.int32)
        return InferRequest(
            "m",
            inputs=[Tensor("INPUT", "INT32", data)],
            sequence_id=sequence,
            sequence_start=True,
            sequence_end=True,
        )

    async def test() -> None:
        instance = Recorder()
        instance.release.set()
        settings = sequence_settings_of(text_format.Parse(config, mc.ModelConfig()), Path("."))
        batcher = SequenceBatchScheduler(settings, [InstanceWorker(instance, "i0")], StartDelay(queued=4))
        await asyncio.gather(*(batcher.submit(shaped(n)) for n in widths))
        ran = [[int(s["CORRID"]) if s["READY"] else None for s in batch] for batch in instance.batches]
        assert ran == [[10, None, 12, None], [None, 11, None, None], [None, None, None, 13]]
        assert {size: batch.count for size, batch in batcher.stats.batches.items()} == {4: 3}
        await close(batcher)

    run(test)


def test_a_sequence_waiting_for_a_slot_past_its_requests_timeout_ends() -> None:
    """Triton's backlog timeout: a sequence in the backlog lives until the earliest of its requests'
    timeouts; then each of its requests fails UNAVAILABLE (counted REJECTED) and its ID needs START.
    A sequence that gets a slot in time runs, whatever its timeouts; one holding a slot is never
    timed out (NVIDIA's L0_sequence_batcher SequenceBatcherRequestTimeoutTest)."""
    config = f'name: "m" max_batch_size: 1 sequence_batching {{ direct {{ }} {CONTROLS} }}'

    def timed(name: str, sequence: int, value: int, timeout_us: int, **flags: bool) -> InferRequest:
        made = request(name, sequence, value, **flags)
        made.timeout_us = timeout_us
        return made

    async def test() -> None:
        instance = Recorder()
        batcher = scheduler(config, instance)  # one slot
        running = asyncio.create_task(batcher.submit(timed("hold-a1", 1, 1, 100_000, start=True)))
        assert await asyncio.to_thread(instance.entered.wait, WAIT)
        later = asyncio.create_task(batcher.submit(timed("a2", 1, 2, 100_000, end=True)))
        waiting = [asyncio.create_task(batcher.submit(timed("b1", 2, 10, 300_000, start=True)))]
        waiting.append(asyncio.create_task(batcher.submit(timed("b2", 2, 20, 5_000_000))))
        patient = asyncio.create_task(batcher.submit(timed("c1", 3, 100, 0, start=True, end=True)))
        await asyncio.wait(waiting, timeout=WAIT)
        for task in waiting:
            error = task.exception()
            assert (
                error is not None and str(error) == "timeout of the corresponding sequence has been expired"
            )
            assert error.code.name == "UNAVAILABLE"
        assert batcher.stats.failures[FailureReason.REJECTED] == 2
        instance.release.set()
        assert [total(await running), total(await later), total(await patient)] == [1, 3, 100]
        with pytest.raises(InvalidArgumentError, match="must specify the START flag"):
            await batcher.submit(request("b3", 2, 30, end=True))
        assert [int(s["CORRID"]) for batch in instance.batches for s in batch] == [1, 1, 3]
        await close(batcher)

    run(test)
