"""The rate limiter (``--rate-limit execution_count``, ``--rate-limit-resource``).

A model instance may declare, in its instance group, the resources one execution needs
(``rate_limiter { resources [{ name count global }] priority }``).  With rate limiting on, an instance
holds its resources for the whole of each execution and waits until they are free before starting
one, across all models: two models that each need the one ``gpu_slot`` there is never run at once.

Resources are counted per device (an instance's GPU, or device 0 for CPU instances) unless declared
``global``.  How many of each exist comes from ``--rate-limit-resource=<name>:<count>[:<device>]``;
a resource no flag declares has as many as the most demanding instance loaded needs, as in Triton
(an instance that goes, unloaded or removed by an instance update, no longer counts).  When
resources free up they go to the waiting instances in order of executions run times priority, then
arrival, so a ``priority: 2`` instance gets about half the turns of a ``priority: 1`` one.

Instances wait on their own threads (the scheduler's worker threads), never on the event loop: the
scheduler keeps forming batches meanwhile.  One lock guards the counts; waiting is on a condition.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from naiad.core.errors import InternalError, InvalidArgumentError
from naiad.scheduling.worker import InstanceWorker

log = logging.getLogger("naiad.scheduling")

#: A resource pool: (name, device), device ``None`` for a global resource.
Pool = tuple[str, int | None]


def parse_resource(text: str) -> tuple[str, int, int | None]:
    """``<name>:<count>[:<device>]`` as ``--rate-limit-resource`` takes it."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not all(p.isdigit() for p in parts[1:]):
        raise ValueError(f"expected <name>:<count>[:<device>], got '{text}'")
    return parts[0], int(parts[1]), int(parts[2]) if len(parts) == 3 else None


@dataclass(slots=True)
class _Waiter:
    rank: tuple[int, int]
    needs: dict[Pool, int]
    granted: bool = False


@dataclass(slots=True, eq=False)
class Gate:
    """One instance's way through the limiter: :meth:`acquire` before an execution, :meth:`release`
    after it (both on the instance's thread)."""

    limiter: RateLimiter
    needs: dict[Pool, int]
    priority: int
    executions: int = 0
    _held: bool = field(default=False, repr=False)

    def acquire(self) -> None:
        self.limiter.acquire(self)
        self._held = True

    def retire(self) -> None:
        """Its instance is gone: its needs no longer size the resources no flag declares."""
        self.limiter.retire(self)

    def release(self) -> None:
        if self._held:
            self._held = False
            self.executions += 1
            self.limiter.release(self.needs)


class RateLimiter:
    """The server's resource counts and the instances waiting for them."""

    def __init__(self, resources: Sequence[tuple[str, int, int | None]]) -> None:
        #: Counts from the command line: (name, device or None for every device) -> count.
        self._declared: dict[tuple[str, int | None], int] = {(n, d): c for n, c, d in resources}
        self._total: dict[Pool, int] = {}
        self._free: dict[Pool, int] = {}
        #: The gates of the instances loaded now.
        self._gates: set[Gate] = set()
        self._waiting: list[_Waiter] = []
        self._arrivals = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def attach(self, config: mc.ModelConfig, workers: Sequence[InstanceWorker]) -> None:
        """Give each worker the gate its instance group asks for (before the workers start).

        Raises :class:`InvalidArgumentError` (the version fails to load) when a declared resource
        count is below what one instance needs: that instance could never run.
        """
        groups = list(_instance_groups(config))
        if len(groups) != len(workers):
            raise InternalError(
                f"model '{config.name}' has {len(workers)} instances for {len(groups)} configured"
            )
        with self._lock:
            gates = [
                (worker, Gate(self, needs, max(1, group.rate_limiter.priority)))
                for worker, (group, device) in zip(workers, groups, strict=True)
                if (needs := self._needs(group.rate_limiter, device))
            ]
            for worker, gate in gates:
                worker.gate = gate
                self._gates.add(gate)
            self._size()

    def retire(self, gate: Gate) -> None:
        with self._lock:
            if gate in self._gates:
                self._gates.discard(gate)
                self._size()
                self._grant()

    def _declared_count(self, pool: Pool) -> int | None:
        return self._declared.get(pool, self._declared.get((pool[0], None)))

    def _needs(self, settings: Any, device: int) -> dict[Pool, int]:
        needs: dict[Pool, int] = {}
        for resource in settings.resources:
            pool: Pool = (resource.name, None if getattr(resource, "global") else device)
            declared = self._declared_count(pool)
            if declared is not None and declared < resource.count:
                raise InvalidArgumentError(
                    f"Resource count for '{resource.name}' is limited to {declared} which will prevent "
                    "scheduling of one or more model instances, the minimum required count is "
                    f"{resource.count}"
                )
            needs[pool] = needs.get(pool, 0) + resource.count
        return needs

    def _size(self) -> None:
        """Each resource's count from the instances loaded now (lock held): the declared count, else
        the most any one of them needs; what executions hold stays held (``free`` moves by the
        change).  Logged as Triton logs its resource map (``--log-verbose`` 1)."""
        totals: dict[Pool, int] = {}
        for gate in self._gates:
            for pool, count in gate.needs.items():
                declared = self._declared_count(pool)
                totals[pool] = declared if declared is not None else max(count, totals.get(pool, 0))
        for pool, total in totals.items():
            self._free[pool] = self._free.get(pool, total) + total - self._total.get(pool, total)
        for pool in set(self._total) - set(totals):  # (no instance left that could hold it)
            del self._free[pool]
        self._total = totals
        if log.isEnabledFor(logging.DEBUG):
            lines = ["", "Max Resource Map===>"]
            for device in sorted({pool[1] for pool in totals}, key=lambda d: -1 if d is None else d):
                lines.append(f"\tDevice: {'GLOBAL' if device is None else device}")
                counts = sorted((name, count) for (name, where), count in totals.items() if where == device)
                lines += [f"\t\tResource: {name}\t Count: {count}" for name, count in counts]
            log.debug("\n".join(lines) + "\n")

    def acquire(self, gate: Gate) -> None:
        """Block until ``gate``'s resources are granted to it."""
        with self._lock:
            self._arrivals += 1
            waiter = _Waiter((gate.executions * gate.priority, self._arrivals), gate.needs)
            self._waiting.append(waiter)
            self._grant()
            while not waiter.granted:
                self._changed.wait()

    def release(self, needs: dict[Pool, int]) -> None:
        with self._lock:
            for pool, count in needs.items():
                self._free[pool] += count
            self._grant()

    def _grant(self) -> None:
        """Hand free resources to the waiters that fit, best rank first (lock held)."""
        granted = False
        for waiter in sorted(self._waiting, key=lambda w: w.rank):
            if all(self._free[pool] >= count for pool, count in waiter.needs.items()):
                for pool, count in waiter.needs.items():
                    self._free[pool] -= count
                waiter.granted = granted = True
        if granted:
            self._waiting = [w for w in self._waiting if not w.granted]
            self._changed.notify_all()


def _instance_groups(config: mc.ModelConfig) -> Iterator[tuple[mc.ModelInstanceGroup, int]]:
    """(group, device) per instance, in the order the repository creates the instances."""
    for group in config.instance_group:
        devices = list(group.gpus) if group.kind == mc.ModelInstanceGroup.KIND_GPU else [0]
        for device in devices:
            for _ in range(group.count):
                yield group, device

