"""The sequence batcher: Triton's scheduler for stateful models (``sequence_batching``).

The requests of one sequence (one correlation ID, START on the first, END on the last) must all reach
the model instance that holds the sequence's state, one after the other.  So a sequence is given a
slot on one instance when it starts and keeps it until its END request has run, or until it has been
idle for ``max_sequence_idle_microseconds`` (then it is forgotten, and a later request for it without
START is refused with Triton's message).  Sequences that find every slot taken wait in a backlog and
take the next free slot in arrival order.

A new sequence takes the free slot with the lowest index on any instance, as in Triton, so sequences
spread over the instances and direct batches stay short.  Each instance has a job queue of its own (so
a sequence's requests run where its slot is) and forms its batches from the head requests of its
sequences, at most one per sequence:

* ``direct``: the batch position of a request is its sequence's slot index, because a model that keeps
  state per batch slot (a TensorRT RNN, say) must find the same sequence at the same position every
  time.  A batch covers the positions up to the highest slot with a ready request; the other positions
  get a *null request* (Triton's ``CopyAsNull``): one real request's inputs as zeros, READY, START and
  END false, CORRID 0 and zero states.  Its result is dropped: it answers nobody, counts in no
  statistic and never touches a sequence's state.  The batch is sent at once, or after
  ``max_queue_delay_microseconds`` when fewer than ``minimum_slot_utilization`` of the slots are ready.
* ``oldest``: the oldest ready heads, as the dynamic batcher would batch them (preferred sizes, delay);
  positions mean nothing, so there are no null requests.

``oldest { preserve_ordering }`` needs no code here: the design already keeps its promise.  Triton runs
one dynamic batcher per instance, and the option makes it hold back a batch's responses until the
batches it formed earlier have answered, since a backend there may still answer one batch while the
next one runs.  Here an instance runs one execution at a time, delivers all of its results in batch
order before it forms the next batch, and batches the oldest ready requests first.  So an instance
answers its requests in the order the scheduler received them, except that a sequence's next request
cannot run before its previous one has (in Triton neither).  Responses from different instances are
not ordered, in Triton either, and a decoupled model's responses go out as the model sends them, as
with the dynamic batcher.

``iterative_sequence`` (Triton's iterative sequences, for continuous batching): a sequence is a
single request that the model may release for rescheduling (``Rescheduled``) any number of times;
it then goes back to the head of its sequence and joins the next batch, until the model answers it.
Such a sequence ends with that answer, END flag or not.  A request without a correlation ID is a
sequence of its own: it is given an ID (the model sees it, as in Triton) and the START flag.  Each run
counts in the statistics, as in Triton.  Triton 2.51 leaves a rescheduled request unanswered forever
when it carried END (its sequence ended at the first run); here it runs on.

Before a request runs the batcher adds the control tensors the model declares (START, END, READY,
CORRID) and its implicit state inputs (``state [...]``); the state outputs of the response become the
next request's inputs and are taken out of the response.  As in the dynamic batcher, all of this lives
on the event loop thread, so there are no locks.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Iterator, Sequence

import numpy as np

from naiad.backends.base import ExecuteResult, Rescheduled
from naiad.core.errors import CancelledError, InvalidArgumentError, UnavailableError
from naiad.core.request import InferRequest, InferResponse, RequestedOutput, Tensor
from naiad.scheduling.batcher import next_batch
from naiad.scheduling.loop_scheduler import LoopScheduler, loop_driven
from naiad.scheduling.policy import SchedulingPolicy
from naiad.scheduling.queue import QUEUED, TAKEN, QueuedRequest
from naiad.scheduling.scheduler import Waiter
from naiad.scheduling.sequence_settings import Array, SequenceSettings
from naiad.scheduling.start_delay import NO_DELAY, StartDelay
from naiad.scheduling.stats import FailureReason, SchedulerStats
from naiad.scheduling.worker import Execution, InstanceWorker, Jobs

log = logging.getLogger("naiad.scheduling")

_MONOTONIC_NS = time.monotonic_ns


class _Sequence:
    """One live sequence: its slot (instance and index), its queued requests and its implicit state."""

    __slots__ = (
        "cancelled",
        "correlation_id",
        "deadline_ns",
        "expired",
        "instance",
        "last_ns",
        "pending",
        "running",
        "slot",
        "states",
    )

    def __init__(self, correlation_id: int | str, now_ns: int) -> None:
        self.correlation_id = correlation_id
        self.instance = -1  # -1: in the backlog, waiting for a slot
        self.slot = -1
        self.pending: deque[QueuedRequest] = deque()
        self.running = False
        self.last_ns = now_ns  # when its latest request came (or went back, rescheduled)
        self.states: dict[str, Array] = {}
        self.cancelled = False  # a waiting request was cancelled: the sequence ends after the running one
        self.expired = False  # idle too long while it held requests: it ends once they have run
        #: In the backlog: when its requests' earliest timeout passes (0: none has one), and with it
        #: the whole sequence (Triton's backlog timeout).
        self.deadline_ns = 0


class _Instance:
    """An instance's worker, job queue and slots (the sequence holding each, ``None`` when free)."""

    __slots__ = ("busy", "delay", "jobs", "on_loop", "slots", "worker")

    def __init__(self, worker: InstanceWorker, slots: int, delay: int) -> None:
        self.worker = worker
        #: ``oldest``: the ready sequences this instance waits for before its first batch (Triton
        #: runs a dynamic batcher per instance there, each with its own start delay).
        self.delay = delay
        self.jobs: Jobs = Jobs()
        self.slots: list[_Sequence | None] = [None] * slots
        self.busy = False
        #: Whether the loop runs its executions (a model process's: ``LoopScheduler._start_on``).
        self.on_loop = loop_driven(worker)

    def members(self) -> list[_Sequence]:
        """The sequences holding a slot, in slot order."""
        return [sequence for sequence in self.slots if sequence is not None]


#: What a batch position holds: the sequence and its request, or ``None`` and a null request.
_Position = tuple[_Sequence | None, QueuedRequest]


class SequenceBatchScheduler(LoopScheduler):
    """Routes, batches and runs the sequences of one model version on its instances."""

    def __init__(
        self,
        settings: SequenceSettings,
        workers: Sequence[InstanceWorker],
        start_delay: StartDelay = NO_DELAY,
    ) -> None:
        """Start one thread per instance; may run off the event loop (models load on a pool).

        ``start_delay`` (Triton's ``TRITONSERVER_DELAY_SCHEDULER`` and ``_BACKLOG_DELAY_SCHEDULER``;
        see :mod:`.start_delay`) holds the first batches: ``direct`` until that many requests wait in
        the slots of all instances and that many in the backlog, ``oldest`` each instance until that
        many of its sequences are ready (the backlog's count does not apply there, as in Triton)."""
        if not workers:
            raise ValueError("a scheduler needs at least one instance")
        super().__init__(settings.model_name)
        self.settings = settings
        per_instance = start_delay.queued if settings.oldest else 0
        self._instances = [_Instance(worker, settings.slots, per_instance) for worker in workers]
        self._delay = NO_DELAY if settings.oldest else start_delay
        if start_delay.backlog:
            log.info("Delaying scheduler until %d backlog queued requests...", start_delay.backlog)
        #: Free slots as (slot index, instance index), a heap: the lowest index is taken first.
        self._free = [(slot, number) for slot in range(settings.slots) for number in range(len(workers))]
        self._sequences: dict[int | str, _Sequence] = {}
        self._backlog: deque[_Sequence] = deque()
        self._running: dict[Execution, tuple[_Instance, list[_Position]]] = {}
        #: A null request's START, END and READY: each control's false value.
        self._not_ready = {control.name: control.values[False] for control in settings.controls}
        self._policy = SchedulingPolicy(
            model_name=settings.model_name,
            batching=settings.batch_size > 1,
            max_batch_size=settings.batch_size,
            preferred_batch_sizes=settings.preferred_batch_sizes,
            max_queue_delay_ns=settings.max_queue_delay_ns,
            shape_inputs=settings.shape_inputs,
            value_inputs=settings.value_inputs,
        )
        #: Whether requests' shapes decide which may share a batch (see ``_direct_batch``).
        self._keyed = settings.batching and self._policy.keyed
        self._state_inputs = {state.output_name: state.input_name for state in settings.states}
        self._state_outputs = frozenset(self._state_inputs)
        #: The state outputs the config also declares outputs: a client that asks for one gets it.
        self._returned = frozenset(state.output_name for state in settings.states if state.returned)
        #: What ``_prepare`` adds to a request's outputs so that its model makes the next state (told
        #: apart from the same names asked by the client, and taken off again, by identity).
        self._state_requests = {name: RequestedOutput(name) for name in self._state_outputs}
        self.stats = SchedulerStats(self._pending)
        self._serial = itertools.count()
        #: The correlation IDs given to iterative requests that come without one.
        self._anonymous = itertools.count(1)
        #: What ``_prepare`` adds to a request's inputs (taken off again when it is rescheduled).
        added = len(settings.controls) + len(settings.states)
        self._added_inputs = added + (settings.correlation is not None)
        for instance in self._instances:
            instance.worker.start(instance.jobs, self._finished_threadsafe)

    # ---- requests -------------------------------------------------------------------------------

    starts_at_once = False

    def start_at_once(self, request: InferRequest, waiter: Waiter) -> bool:
        """Never: a sequence's requests wait for their slot (``submit``)."""
        return False

    async def submit(self, request: InferRequest) -> InferResponse:
        """Queue ``request`` behind the earlier requests of its sequence and return its response."""
        settings = self.settings
        if self._closing:
            raise UnavailableError(f"model '{settings.model_name}' is unloading")
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._check(request)
        now = _MONOTONIC_NS()
        correlation_id = request.sequence_id
        sequence = self._sequences.get(correlation_id)
        if settings.iterative and correlation_id in (0, ""):  # a sequence of its own, never looked up
            request.sequence_id = next(self._anonymous)
            request.sequence_start = True
            sequence = _Sequence(request.sequence_id, now)
            self._admit(sequence)
        elif sequence is None:
            if not request.sequence_start:
                raise InvalidArgumentError(
                    f"inference request for sequence {correlation_id} to model '{settings.model_name}' "
                    "must specify the START flag on the first request of the sequence"
                )
            sequence = self._sequences[correlation_id] = _Sequence(correlation_id, now)
            self._admit(sequence)
        elif request.sequence_start:
            log.warning(
                "sequence %s for model '%s' has a conflict. The previous sequence did not end before "
                "this sequence start. Previous sequence will be terminated early.",
                correlation_id,
                settings.model_name,
            )
        if request.sequence_end and self._sequences.get(correlation_id) is sequence:
            del self._sequences[correlation_id]  # a later START with this ID begins a new sequence
        entry = QueuedRequest(request, self._loop.create_future(), now)
        if self._keyed:
            entry.shape_key = self._policy.shape_key(request)
        sequence.pending.append(entry)
        sequence.last_ns = now
        self._arm(now + self.settings.idle_ns)  # the reaper's turn, even while the request runs
        if sequence.instance < 0 and request.timeout_us:  # waiting for a slot, for so long at most
            deadline = now + request.timeout_us * 1000
            if not sequence.deadline_ns or deadline < sequence.deadline_ns:
                sequence.deadline_ns = deadline
                self._arm(deadline)
        if sequence.instance >= 0:
            self._dispatch(self._instances[sequence.instance], now)
        elif self._delay:  # a request in the backlog counts towards the start delay
            self._dispatch_all(now)
        try:
            return await entry.future
        except asyncio.CancelledError:
            if entry.state != TAKEN:
                self._cancel(sequence, entry)
            else:  # with an instance already: counted when its execution finishes
                request.cancel()
            raise

    def _cancel(self, sequence: _Sequence, entry: QueuedRequest) -> None:
        """A request of ``sequence`` was cancelled while it waited (for its turn, or for a slot in the
        backlog): as in Triton, the whole sequence ends.  Each of its requests still waiting fails
        CANCELLED and counts as such, a later request of its ID needs START, and its slot is freed
        (once the request running now, if one is, has finished)."""
        now = _MONOTONIC_NS()
        sequence.pending.remove(entry)
        self.stats.fail(FailureReason.CANCELED, now - entry.enqueue_ns)
        while sequence.pending:
            waiting = sequence.pending.popleft()
            self.stats.fail(FailureReason.CANCELED, now - waiting.enqueue_ns)
            if not waiting.future.done():
                waiting.future.set_exception(CancelledError("Request was cancelled"))
        if self._sequences.get(sequence.correlation_id) is sequence:
            del self._sequences[sequence.correlation_id]
        if sequence.running:
            sequence.cancelled = True
        else:
            self._end(sequence)  # (an iterative one may have been rescheduled: its slot is free now)
        self._check_drained()

    def _check(self, request: InferRequest) -> None:
        name = self.settings.model_name
        if self.settings.batching and request.batch_size > 1:
            raise InvalidArgumentError(
                f"inference request to model '{name}' must specify batch-size 1 due to requirements "
                "of sequence batcher"
            )
        if request.sequence_id in (0, "") and not self.settings.iterative:
            raise InvalidArgumentError(
                f"inference request to model '{name}' must specify a non-zero or non-empty correlation ID"
            )
        correlation = self.settings.correlation
        if correlation is not None:
            correlation.check(request.sequence_id, name, request.id)  # now, not in a batch

    def _admit(self, sequence: _Sequence) -> None:
        """Give ``sequence`` the free slot with the lowest index, or queue it for one."""
        if not self._free:
            self._backlog.append(sequence)
            return
        slot, number = heapq.heappop(self._free)
        self._seat(sequence, number, slot)

    def _seat(self, sequence: _Sequence, number: int, slot: int) -> None:
        sequence.deadline_ns = 0  # (its requests' timeouts count only in the backlog, as in Triton)
        sequence.instance = number
        sequence.slot = slot
        self._instances[number].slots[slot] = sequence

    def _end(self, sequence: _Sequence) -> None:
        """Forget ``sequence``: free its slot, or take it out of the backlog."""
        if sequence.instance >= 0:
            self._release(sequence)
        elif sequence in self._backlog:
            self._backlog.remove(sequence)
            if self._sequences.get(sequence.correlation_id) is sequence:
                del self._sequences[sequence.correlation_id]

    def _release(self, sequence: _Sequence) -> None:
        """Free the slot of ``sequence`` and hand it to the first sequence of the backlog."""
        number, slot = sequence.instance, sequence.slot
        self._instances[number].slots[slot] = None
        sequence.instance = sequence.slot = -1
        if self._sequences.get(sequence.correlation_id) is sequence:
            del self._sequences[sequence.correlation_id]
        if self._backlog:
            self._seat(self._backlog.popleft(), number, slot)
        else:
            heapq.heappush(self._free, (slot, number))

    # ---- dispatch -------------------------------------------------------------------------------

    def _dispatch_all(self, now: int) -> None:
        for instance in self._instances:
            self._dispatch(instance, now)

    def _dispatch(self, instance: _Instance, now: int) -> None:
        """Run the next batch on ``instance`` if it is free and its batching rule says so."""
        if instance.busy:
            return
        ready = [s for s in instance.members() if s.pending and not s.running]
        if not ready:
            return
        if (self._delay or instance.delay) and not self._closing and self._held(instance, len(ready), now):
            return
        settings = self.settings
        if settings.oldest:
            ready.sort(key=lambda s: s.pending[0].enqueue_ns)
            count, wake_ns = next_batch((s.pending[0] for s in ready), self._policy, now, self._closing)
            if not count:
                self._arm(wake_ns)
                return
            batch: list[_Position] = [(sequence, self._prepare(sequence)) for sequence in ready[:count]]
        else:
            oldest = min(s.pending[0].enqueue_ns for s in ready)
            delay = settings.max_queue_delay_ns
            utilization = len(ready) / settings.slots
            if (
                delay
                and utilization < settings.minimum_slot_utilization
                and now - oldest < delay
                and not self._closing
            ):
                self._arm(oldest + delay)
                return
            batch = self._direct_batch(instance, ready, now)
        entries = [entry for _, entry in batch]
        execution = Execution(entries, now, next(self._serial), keep_cancelled=not settings.oldest)
        self._running[execution] = (instance, batch)
        instance.busy = True
        if instance.on_loop:
            self._start_on(instance.worker, execution)
        else:
            instance.jobs.put(execution)

    def _held(self, instance: _Instance, ready: int, now: int) -> bool:
        """Whether the start delay still holds ``instance``'s first batch (``ready``: its sequences
        with a request to run).  Once reached it is over for good, and (``direct``) every instance
        is looked at again."""
        if instance.delay:
            if ready < instance.delay:
                return True
            instance.delay = 0
            return False
        waiting = sum(len(s.pending) for held in self._instances for s in held.members())
        backlog = sum(len(s.pending) for s in self._backlog)
        if waiting < self._delay.queued or backlog < self._delay.backlog:
            return True
        self._delay = NO_DELAY
        self._arm(now)  # the other instances' batches, on the next timer
        return False

    def _direct_batch(self, instance: _Instance, ready: list[_Sequence], now: int) -> list[_Position]:
        """Position i holds the next request of the sequence in slot i, or a null request, up to the
        highest slot with a ready sequence (``ready`` is in slot order).

        As in Triton, where inputs must agree in shape to share a batch (variable-size and not
        ragged, or shape tensors), the lowest slot's request decides: a slot whose next request
        differs gets a null request this time and waits for a later batch."""
        last = ready[-1].slot
        if self._keyed:
            key = ready[0].pending[0].shape_key
            ready = [sequence for sequence in ready if sequence.pending[0].shape_key == key]
        taken = {sequence.slot: (sequence, self._prepare(sequence)) for sequence in ready}
        like = taken[ready[0].slot][1].request  # Triton copies the lowest slot's request
        return [taken.get(slot) or (None, self._null(like, now)) for slot in range(last + 1)]

    def _null(self, like: InferRequest, now: int) -> QueuedRequest:
        """A null request shaped like ``like`` (already prepared): it batches like ``like`` (same
        inputs, datatypes and shapes, so the backends concatenate it as any request), but its data is
        zeros (empty strings for BYTES), its START, END and READY are false and its CORRID and states
        zero: the model can tell it from a real request and must not take it for one.  Nobody awaits
        its future."""
        not_ready = self._not_ready
        inputs = []
        for tensor in like.inputs:
            data = not_ready.get(tensor.name)
            if data is None:
                data = (
                    np.full(tensor.data.shape, b"", dtype=np.object_)
                    if tensor.datatype == "BYTES"
                    else np.zeros_like(tensor.data)
                )
            inputs.append(Tensor(tensor.name, tensor.datatype, data))
        outputs = None if like.outputs is None else list(like.outputs)
        request = InferRequest(like.model_name, like.model_version, inputs=inputs, outputs=outputs)
        return QueuedRequest(request, asyncio.get_running_loop().create_future(), now)

    def _prepare(self, sequence: _Sequence) -> QueuedRequest:
        """Take the sequence's next request and add its control tensors and implicit state."""
        entry = sequence.pending.popleft()
        entry.state = TAKEN
        sequence.running = True
        request = entry.request
        settings = self.settings
        inputs = request.inputs
        for control in settings.controls:
            if control.kind == "START":
                flag = request.sequence_start
            elif control.kind == "END":
                flag = request.sequence_end
            else:
                flag = True
            inputs.append(Tensor(control.name, control.datatype, control.values[flag]))
        correlation = settings.correlation
        if correlation is not None:
            data = correlation.tensor_data(sequence.correlation_id, settings.model_name)
            inputs.append(Tensor(correlation.name, correlation.datatype, data))
        if settings.states:
            if request.sequence_start:
                sequence.states.clear()
            for state in settings.states:
                data = sequence.states.get(state.input_name, state.initial)
                inputs.append(Tensor(state.input_name, state.datatype, data))
            if request.outputs is not None:  # the model must produce the next state all the same
                asked = {output.name for output in request.outputs}
                request.outputs = request.outputs + [
                    added for name, added in self._state_requests.items() if name not in asked
                ]
        return entry

    def _pending(self) -> int:
        """Requests waiting for their sequence's turn or for a slot."""
        return sum(len(s.pending) for s in self._waiting())

    def _waiting(self) -> list[_Sequence]:
        """Every sequence that holds a slot or waits for one."""
        return [s for instance in self._instances for s in instance.members()] + list(self._backlog)

    # ---- timers: batch delays and idle sequences ------------------------------------------------

    def _dispatch_due(self, now: int) -> None:
        self._reap(now)
        self._expire_backlog(now)
        self._dispatch_all(now)

    def _expire_backlog(self, now: int) -> None:
        """End the sequences that waited for a slot past their requests' earliest timeout: as in
        Triton, each of their requests fails UNAVAILABLE (REJECTED), and a later request of the ID
        needs START."""
        next_ns = 0
        for sequence in [s for s in self._backlog if s.deadline_ns]:
            if sequence.deadline_ns > now:
                next_ns = min(next_ns or sequence.deadline_ns, sequence.deadline_ns)
                continue
            self._backlog.remove(sequence)
            if self._sequences.get(sequence.correlation_id) is sequence:
                del self._sequences[sequence.correlation_id]
            while sequence.pending:
                entry = sequence.pending.popleft()
                self.stats.fail(FailureReason.REJECTED, now - entry.enqueue_ns)
                if not entry.future.done():
                    entry.future.set_exception(
                        UnavailableError("timeout of the corresponding sequence has been expired")
                    )
        if next_ns:
            self._arm(next_ns)

    def _reap(self, now: int) -> None:
        """Forget the sequences that received no request for longer than
        ``max_sequence_idle_microseconds``.

        As in Triton, the time counts from the sequence's latest request's arrival, whether or not
        that request has run yet: a sequence whose requests are still queued or running past it is
        forgotten at once (a later request of its ID needs START; an iterative request it releases
        for rescheduling fails so) and keeps its slot until they have run.
        """
        idle_ns = self.settings.idle_ns
        next_ns = 0
        for instance in self._instances:
            for sequence in instance.members():
                if sequence.expired:
                    continue
                expiry = sequence.last_ns + idle_ns
                if expiry <= now:
                    busy = sequence.running or sequence.pending
                    log.info(
                        "sequence %s of model '%s' was idle for longer than %d us: %s",
                        sequence.correlation_id,
                        self.settings.model_name,
                        idle_ns // 1000,
                        "it ends once its requests have run" if busy else "its slot is released",
                    )
                    if busy:
                        sequence.expired = True
                        if self._sequences.get(sequence.correlation_id) is sequence:
                            del self._sequences[sequence.correlation_id]
                    else:
                        self._release(sequence)
                elif not next_ns or expiry < next_ns:
                    next_ns = expiry
        if next_ns:
            self._arm(next_ns)

    # ---- results --------------------------------------------------------------------------------

    def _finished(self, execution: Execution) -> None:
        now = _MONOTONIC_NS()
        instance, batch = self._running.pop(execution)
        instance.busy = False
        stats = self.stats
        execution.drop_skipped(now, stats)
        real = [(sequence, entry) for sequence, entry in batch if sequence is not None]
        ran = len(execution.entries) - (len(batch) - len(real))  # null requests are never skipped
        if ran:
            # As in Triton, the execution's batch size counts its null requests (the model ran them);
            # only real requests count as inferences, as they succeed.
            stats.execution(
                len(execution.entries),
                execution.start_ns - execution.dispatch_ns,
                execution.end_ns - execution.start_ns,
                now - execution.end_ns,
            )
            stats.last_inference_ms = time.time_ns() // 1_000_000
        results = dict(zip(map(id, execution.entries), execution.results, strict=True))
        for sequence, entry in real:
            sequence.running = False
            request = entry.request
            if self._state_outputs and request.outputs is not None:  # as the client asked again
                added = self._state_requests
                request.outputs = [o for o in request.outputs if o is not added.get(o.name)]
            result = results.get(id(entry))
            if type(result) is Rescheduled and self.settings.iterative and not entry.future.done():
                execution.count(entry, now, stats)
                if not sequence.expired:
                    self._reschedule(sequence, entry, now)
                    continue
                result = InvalidArgumentError(  # Triton enqueues it again, without START
                    f"inference request for sequence {sequence.correlation_id} to model "
                    f"'{self.settings.model_name}' must specify the START flag on the first request of "
                    "the sequence"
                )
            if result is not None:
                self._deliver(sequence, entry, result, execution, now)
            if sequence.instance >= 0 and (
                request.sequence_end
                or sequence.cancelled
                or ((self.settings.iterative or sequence.expired) and not sequence.pending)
            ):
                self._release(sequence)
        self._dispatch_due(now)
        self._check_drained()

    def _reschedule(self, sequence: _Sequence, entry: QueuedRequest, now: int) -> None:
        """Put a request its model released for rescheduling back at the head of its sequence, as it
        came (without what ``_prepare`` added), for a later batch; START is false from now on."""
        request = entry.request
        if self._added_inputs:
            del request.inputs[-self._added_inputs :]
        request.sequence_start = False
        entry.state = QUEUED
        entry.enqueue_ns = sequence.last_ns = now
        sequence.pending.appendleft(entry)
        self._arm(now + self.settings.idle_ns)

    def _deliver(
        self, sequence: _Sequence, entry: QueuedRequest, result: ExecuteResult, execution: Execution, now: int
    ) -> None:
        """Keep the state outputs for the sequence's next request (out of memory that is reused once
        the request is answered) and answer the request, with those it asked for and may have."""
        if isinstance(result, InferResponse) and self._state_outputs:
            request = entry.request
            memory, asked = request.output_memory, request.outputs
            answered = []
            for tensor in result.outputs:
                name = tensor.name
                if name in self._state_outputs:
                    data = tensor.data
                    sequence.states[self._state_inputs[name]] = data if memory is None else memory.kept(data)
                    wanted = name in self._returned and (asked is None or any(o.name == name for o in asked))
                    if not wanted:
                        continue
                answered.append(tensor)
            result.outputs = answered
        execution.settle(entry, result, now, self.stats)

    # ---- closing --------------------------------------------------------------------------------
    # Sequences still open when the model closes simply end: their state goes with the model.

    def _empty(self) -> bool:
        return not self._running and not self._pending()

    def _take_queued(self) -> Iterator[QueuedRequest]:
        for sequence in self._waiting():
            while sequence.pending:
                yield sequence.pending.popleft()

    def _stop_instances(self, timeout: float) -> None:
        for instance in self._instances:
            instance.jobs.put(None)
        for instance in self._instances:
            instance.worker.join(timeout)
