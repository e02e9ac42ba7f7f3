"""Which bytes each load slot sends next: the prebuilt requests in turn, or the steps of a sequence.

For sequence models every slot plays one sequence at a time under its own correlation ID (start flag on
the first request, end flag on the last), as perf_analyzer does; IDs come from ``--sequence-id-range``,
split between worker processes so that no two slots share one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from naiad.tools.perf.payloads import PayloadBuilder


@dataclass(frozen=True)
class SequencePlan:
    length: int | None  # None: each stream's own length (data from a JSON file)
    variation: float  # percent
    id_start: int
    id_end: int  # exclusive


class Requests:
    """The requests of one worker process: shared prebuilt payloads and the correlation IDs it owns."""

    def __init__(
        self,
        builder: PayloadBuilder,
        streams: list[list[int]],
        sequence: SequencePlan | None,
        worker: int,
        workers: int,
    ) -> None:
        self.builder = builder
        self.streams = streams
        self.sequence = sequence
        self.worker, self.workers = worker, workers
        self.prebuilt = [] if sequence else [builder.build(i) for stream in streams for i in stream]
        self._cursor = worker
        self._next_id = 0
        self._next_stream = worker
        self._sequences = 0
        self.random = random.Random(worker)

    def source(self) -> Source:
        if self.sequence is None:
            return Source(self)
        return SequenceSource(self, self.sequence)

    def next_prebuilt(self) -> bytes:
        self._cursor += 1
        return self.prebuilt[self._cursor % len(self.prebuilt)]

    def new_sequence_id(self, plan: SequencePlan) -> int:
        span = max(1, plan.id_end - plan.id_start)
        value = plan.id_start + (self._next_id * self.workers + self.worker) % span
        self._next_id += 1
        return value

    def take_sequences(self) -> int:
        """Sequences started since the last call."""
        count, self._sequences = self._sequences, 0
        return count

    def new_stream(self) -> list[int]:
        self._sequences += 1
        self._next_stream += 1
        return self.streams[self._next_stream % len(self.streams)]


class Source:
    """A slot's supply of requests."""

    def __init__(self, requests: Requests) -> None:
        self.requests = requests

    def next(self) -> bytes:
        return self.requests.next_prebuilt()

    def unfinished(self) -> bool:
        """A sequence is under way (its END not sent yet)."""
        return False

    def end_next(self) -> None:
        """Make the next request the last of the current sequence."""


class SequenceSource(Source):
    def __init__(self, requests: Requests, plan: SequencePlan) -> None:
        super().__init__(requests)
        self.plan = plan
        self.position = 0
        self.length = 0
        self.stream: list[int] = []
        self.correlation_id = 0

    def _start(self) -> None:
        requests, plan = self.requests, self.plan
        self.stream = requests.new_stream()
        length = len(self.stream) if plan.length is None else plan.length
        if plan.length is not None and plan.variation > 0:
            spread = length * plan.variation / 100
            length = round(requests.random.uniform(length - spread, length + spread))
        self.length = max(1, length)
        self.position = 0
        self.correlation_id = requests.new_sequence_id(plan)

    def unfinished(self) -> bool:
        return 0 < self.position < self.length

    def end_next(self) -> None:
        self.length = self.position + 1

    def next(self) -> bytes:
        if self.position >= self.length:
            self._start()
        position = self.position
        self.position += 1
        step = self.stream[position % len(self.stream)]
        flags = (self.correlation_id, position == 0, position == self.length - 1)
        return self.requests.builder.build(step, flags)
