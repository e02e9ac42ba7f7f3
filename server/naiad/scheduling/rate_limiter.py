"""The rate limiter (``--rate-limit execution_count``, ``--rate-limit-resource``).

A model instance may declare, in its instance group, the resources one execution needs
(``rate_limiter { resources [{ name count global }] priority }``).  With rate limiting on, an instance
holds its resources for the whole of each execution and waits until they are free before starting
one, across all models: two models that each need the one ``gpu_slot`` there is never run at once.

Resources are counted per device (an instance's GPU, or device 0 for CPU instances) unless declared
``global``.  How many of each exist comes from ``--rate-limit-resource=<name>:<count>[:<device>]``
(without a device, that many on every device; a global resource has the most any flag of its name
gives).  With no such flag each resource has as many as the most demanding instance loaded needs
(an instance that goes, unloaded or removed by an instance update, no longer counts); once one is
given, a resource no flag names has none.  As in Triton, an instance needing more than there is, or
a resource some instance needs globally and another per device, fails its version's load.  When
resources free up they go to the waiting instances in order of executions run (this one included)
times priority, then priority, then arrival, so a ``priority: 2`` instance gets half the turns of a
``priority: 1`` one; the first waiter that does not fit holds the rest back, as in Triton.

Instances wait on their own threads (the scheduler's worker threads), never on the event loop: the
scheduler keeps forming batches meanwhile.  One lock guards the counts; waiting is on a condition.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

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
    rank: tuple[int, int, int]
    needs: dict[Pool, int]
    granted: bool = False


@dataclass(slots=True, eq=False)
class Gate:
    """One instance's way through the limiter: :meth:`acquire` before an execution, :meth:`release`
    after it (both on the instance's thread).

    An instance whose model has more work queued when it releases asks again in the same step
    (``release(again=True)``), as Triton stages an instance with pending payloads on release: the
    freed resources then go to it or to another waiting instance by rank, rather than always to the
    other, which would make priorities mean nothing between two busy models.  Its next
    :meth:`acquire` waits on that request; :meth:`withdraw` takes it back when no work came.
    """

    limiter: RateLimiter
    needs: dict[Pool, int]
    priority: int
    executions: int = 0
    _held: bool = field(default=False, repr=False)
    #: The request to the limiter made on release, for the next execution.
    staged: _Waiter | None = field(default=None, repr=False)

    def acquire(self) -> None:
        self.limiter.acquire(self)
        self._held = True

    def retire(self) -> None:
        """Its instance is gone: its needs no longer size the resources no flag declares."""
        self.withdraw()
        self.limiter.retire(self)

    def release(self, again: bool = False) -> None:
        if self._held:
            self._held = False
            self.executions += 1
            self.limiter.release(self, again)

    def withdraw(self) -> None:
        """Take back the request made on release (granted or not): the work went elsewhere."""
        if self.staged is not None:
            self.limiter.withdraw(self)


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

        Raises :class:`InvalidArgumentError` (the version fails to load, no gate attached) when an
        instance needs more of a resource than the flags give, or when a resource would be both
        global and per device among the instances loaded: those instances could never be scheduled.
        """
        groups = list(_instance_groups(config))
        if len(groups) != len(workers):
            raise InternalError(
                f"model '{config.name}' has {len(workers)} instances for {len(groups)} configured"
            )
        with self._lock:
            wanted = [
                (worker, needs, max(1, group.rate_limiter.priority))
                for worker, (group, device) in zip(workers, groups, strict=True)
                if (needs := _needs(group.rate_limiter, device))
            ]
            self._check([needs for _, needs, _ in wanted])
            for worker, needs, priority in wanted:
                gate = Gate(self, needs, priority)
                worker.gate = gate
                self._gates.add(gate)
            self._size()

    def retire(self, gate: Gate) -> None:
        with self._lock:
            if gate in self._gates:
                self._gates.discard(gate)
                self._size()
                self._grant()

    def _declared_count(self, pool: Pool) -> int:
        """What the flags give ``pool`` (some flag given): a global resource the most any flag of
        its name gives; on a device, its own flag's or the every-device one's, whichever is more."""
        name, device = pool
        counts = [
            count
            for (declared, where), count in self._declared.items()
            if declared == name and (device is None or where in (device, None))
        ]
        return max(counts, default=0)

    def _check(self, wanted: list[dict[Pool, int]]) -> None:
        """Refuse new instances' needs (lock held), in Triton's order and words."""
        if self._declared:
            for needs in wanted:
                for pool, count in needs.items():
                    if (declared := self._declared_count(pool)) < count:
                        raise InvalidArgumentError(
                            f'Resource count for "{pool[0]}" is limited to {declared} which will prevent '
                            "scheduling of one or more model instances, the minimum required count is "
                            f"{count}"
                        )
        pools = {pool for gate in self._gates for pool in gate.needs}.union(*wanted)
        global_names = {name for name, device in pools if device is None}
        for name in sorted({name for name, device in pools if device is not None} & global_names):
            raise InvalidArgumentError(
                f'Resource "{name}" is present as both global and device-specific resource in the '
                "model configuration."
            )

    def _size(self) -> None:
        """Each resource's count from the instances loaded now (lock held): what the flags give it,
        else (no flag at all) the most any one of them needs; what executions hold stays held
        (``free`` moves by the change).  Logged as Triton logs its resource map (``--log-verbose`` 1)."""
        totals: dict[Pool, int] = {}
        for gate in self._gates:
            for pool, count in gate.needs.items():
                if self._declared:
                    totals[pool] = self._declared_count(pool)
                else:
                    totals[pool] = max(count, totals.get(pool, 0))
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
        """Block until ``gate``'s resources are granted to it (to the request its release made,
        if it made one)."""
        with self._lock:
            waiter, gate.staged = gate.staged, None
            if waiter is None:
                waiter = self._wait(gate)
                self._grant()
            while not waiter.granted:
                self._changed.wait()

    def release(self, gate: Gate, again: bool) -> None:
        """Free ``gate``'s resources; with ``again``, it asks for them anew in the same step."""
        with self._lock:
            for pool, count in gate.needs.items():
                self._free[pool] += count
            if again:
                gate.staged = self._wait(gate)
            self._grant()

    def withdraw(self, gate: Gate) -> None:
        with self._lock:
            waiter, gate.staged = gate.staged, None
            if waiter is None:
                return
            if waiter.granted:
                for pool, count in waiter.needs.items():
                    self._free[pool] += count
            else:
                self._waiting.remove(waiter)
            self._grant()

    def _wait(self, gate: Gate) -> _Waiter:
        """A new request for ``gate``'s resources (lock held), ranked by the executions its instance
        will have run once this one ends times its priority (weighted fair queueing's finish tag:
        busy instances of priorities 1 and 2 run 2:1, the first one first), then by priority, then
        by arrival."""
        self._arrivals += 1
        rank = ((gate.executions + 1) * gate.priority, gate.priority, self._arrivals)
        waiter = _Waiter(rank, gate.needs)
        self._waiting.append(waiter)
        return waiter

    def _grant(self) -> None:
        """Hand free resources to the waiters, best rank first, until one does not fit: it waits
        at the head, as in Triton, so that instances needing little cannot starve one needing
        more by taking turns (lock held)."""
        granted = False
        for waiter in sorted(self._waiting, key=lambda w: w.rank):
            if not all(self._free[pool] >= count for pool, count in waiter.needs.items()):
                break
            for pool, count in waiter.needs.items():
                self._free[pool] -= count
            waiter.granted = granted = True
        if granted:
            self._waiting = [w for w in self._waiting if not w.granted]
            self._changed.notify_all()


def _needs(settings: mc.ModelRateLimiter, device: int) -> dict[Pool, int]:
    """What one instance of a group on ``device`` holds for each execution."""
    needs: dict[Pool, int] = {}
    for resource in settings.resources:
        pool: Pool = (resource.name, None if getattr(resource, "global") else device)
        needs[pool] = needs.get(pool, 0) + resource.count
    return needs


def _instance_groups(config: mc.ModelConfig) -> Iterator[tuple[mc.ModelInstanceGroup, int]]:
    """(group, device) per scheduled instance, in the order the repository creates them (passive
    ones are never scheduled, so never rate limited, as in Triton)."""
    for group in config.instance_group:
        if group.passive:
            continue
        devices = list(group.gpus) if group.kind == mc.ModelInstanceGroup.KIND_GPU else [0]
        for device in devices:
            for _ in range(group.count):
                yield group, device
