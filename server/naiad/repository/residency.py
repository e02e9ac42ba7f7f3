"""Which models stay loaded when there are more models than memory: on-demand loading, pins, the budget.

A repository may hold far more models than one server's memory.  Models whose names match a
``--load-on-demand`` pattern are loaded by the first request that names them; under
``--model-memory-budget`` a load that would pass the budget first unloads (evicts) models that were
loaded on demand: the least recently used ones, or with ``--eviction-policy=gdsf`` those whose requests
and load time are worth the least per byte held (see :class:`Residency`).  Models loaded any other way
(at start, by the load API, by POLL) are *pinned*: they are the operator's or user's decision and are
never evicted.  Nor is a model with a request in flight or queued, nor one loaded less than
``--min-residency-secs`` ago (so that a burst of requests over more models than fit cannot thrash loads).

This module keeps the facts and makes the decisions (what is evictable, in which order, what a load is
expected to need); the repository manager (:mod:`naiad.repository.manager`) performs the loads and
unloads, and the counters here are what ``naiad_*`` metrics read (:mod:`naiad.metrics.residency`).

A model's footprint is what its versions measured when they loaded (:mod:`naiad.repository.footprint`);
a model never loaded yet is expected to need what it needed last time, else the mean of the models
measured so far (a first guess that the check after each load corrects by evicting more).  A load that
found room *reserves* that expectation until it completes: loads running side by side would otherwise
each be checked against the memory held before any of them counted, and pass the budget together.  Where GPUs
are, ``--model-gpu-memory-budget`` applies the same way to each GPU's measured growth (a model never
loaded is expected to need nothing there until it has been measured once).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from naiad.repository.model import Model

#: Upper bounds, in seconds, of the ``naiad_on_demand_wait_seconds`` histogram's buckets.
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
#: The message of an on-demand load that cannot fit even after every evictable model is gone.
BUDGET_EXHAUSTED = "model memory budget exhausted"
ON_DEMAND = "on_demand"
EXPLICIT = "explicit"
#: ``--eviction-policy`` values: least recently used first; GreedyDual-Size-Frequency.
LRU = "lru"
GDSF = "gdsf"
POLICIES = (LRU, GDSF)
#: The size below which GDSF counts every model as this size: a model's session, scheduler and
#: statistics hold about that much whatever its weights, and a footprint measured near zero (a load
#: that ran beside an unload) must not make a model look free to keep.
GDSF_MIN_SIZE = 1 << 20
#: The load time below which GDSF counts every load as this long (seconds): loads under a second cost
#: their requests about the same wait, and how long one took on a busy server is mostly the server's
#: load, not the model's (on the density benchmark, weighing sub-second load times added 30% more loads).
GDSF_MIN_COST = 1.0


def loading_message(name: str) -> str:
    """What a request gets when its on-demand load takes longer than it may wait."""
    return f"model '{name}' is loading on demand; try again"


def footprint(model: Model | None) -> int:
    """Resident bytes the versions of ``model`` that hold instances measured when they loaded."""
    if model is None:
        return 0
    return sum(mv.memory_bytes for mv in model.serving())


def gpu_footprint(model: Model | None) -> tuple[int, ...]:
    """Per GPU, what the versions of ``model`` that hold instances grew GPU memory by when they loaded."""
    return _add(*(mv.gpu_memory_bytes for mv in model.serving())) if model is not None else ()


def _add(*rows: tuple[int, ...]) -> tuple[int, ...]:
    """Per-GPU sums of rows that may be of different lengths (a row is empty without GPUs)."""
    width = max((len(row) for row in rows), default=0)
    return tuple(sum(row[i] for row in rows if i < len(row)) for i in range(width))


@dataclass(slots=True)
class WaitHistogram:
    """Cumulative counts of on-demand waits, in Prometheus' histogram shape."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(WAIT_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(WAIT_BUCKETS, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)


class Residency:
    """The on-demand and eviction policy of one server, and its counters.

    Eviction order.  ``lru`` (the default) evicts the least recently used model first.  Under a budget
    what a server can keep is bytes, and models differ in size by orders of magnitude (a 100 KiB
    identity, a 50 MiB Python model): evicting one large cold model can spare several small warm ones,
    and each eviction costs a load later.  ``gdsf`` (GreedyDual-Size-Frequency, Cherkasova 1998) gives
    each loaded model the priority ``L + requests since it loaded x seconds its loads take / MiB it
    holds`` and evicts the lowest; ``L`` rises to each evicted model's priority, so a model that stops
    being asked for falls behind the ones asked for since, however small it is.  The load time is the
    cost of being wrong: a model that takes 30 s to load is worth keeping over one that takes 50 ms
    even where it holds more memory per request (with a cost of 1 a busy 14 GB model would go before a
    10 MiB one asked for once); loads under a second count as one second (:data:`GDSF_MIN_COST`).  On
    the density benchmark (200 models of under 1 MiB to 75 MiB, Zipf requests, 3x the budget) it needs a
    third of the loads LRU needs (benchmarks/density/README.md).  Recency still breaks ties.
    """

    def __init__(
        self,
        patterns: Sequence[str] = (),
        *,
        budget: int | None = None,
        gpu_budget: int | None = None,
        load_timeout: float = 60,
        min_residency: float = 30,
        policy: str = LRU,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown eviction policy '{policy}' (one of {', '.join(POLICIES)})")
        self.patterns = tuple(patterns)
        self.policy = policy
        self.budget = budget
        self.gpu_budget = gpu_budget
        self.load_timeout = load_timeout
        self.min_residency = min_residency
        self.clock = clock
        self.pinned: set[str] = set()
        self.loaded_at: dict[str, float] = {}
        self.last_used: dict[str, float] = {}
        #: Last measured footprint per model name (kept after an unload: the next load's estimate).
        self.footprints: dict[str, int] = {}
        self.gpu_footprints: dict[str, tuple[int, ...]] = {}
        #: Loads under way that found room: what each is expected to need (host bytes, per GPU).
        self.reserved: dict[str, tuple[int, tuple[int, ...]]] = {}
        self.loads: Counter[tuple[str, str]] = Counter()
        self.evictions: Counter[str] = Counter()
        self.hits = 0
        self.misses = 0
        self.waits = WaitHistogram()
        #: Requests counted as misses while they waited for a load, whose run is not to count a hit.
        self._owed: Counter[str] = Counter()
        self._matches: dict[str, bool] = {}
        #: GDSF: requests each loaded model ran since it loaded, its priority, and the inflation ``L``.
        #: ``_load_seconds``: how long its loads take (a running mean, kept after an unload).
        self._load_seconds: dict[str, float] = {}
        self._uses: Counter[str] = Counter()
        self._priority: dict[str, float] = {}
        self._inflation = 0.0

    # ---- which models ------------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return bool(self.patterns)

    def on_demand(self, name: str) -> bool:
        """Whether a request naming ``name`` may load it (fnmatch over ``--load-on-demand``)."""
        known = self._matches.get(name)
        if known is None:
            if len(self._matches) > 100_000:  # names come from clients: bound what is remembered
                self._matches.clear()
            known = self._matches[name] = any(fnmatchcase(name, p) for p in self.patterns)
        return known

    # ---- events --------------------------------------------------------------------------------

    def loaded(self, name: str, model: Model, on_demand: bool, seconds: float = 0.0) -> None:
        """A load of ``name`` completed in ``seconds`` (its measured footprint now counts instead of its
        reservation); one not made on demand pins the model."""
        self.reserved.pop(name, None)
        if seconds > 0:
            before = self._load_seconds.get(name)
            self._load_seconds[name] = seconds if before is None else (before + seconds) / 2
        now = self.clock()
        self.loaded_at[name] = now
        self.last_used.setdefault(name, now)
        self.footprints[name] = footprint(model)
        self.gpu_footprints[name] = gpu_footprint(model)
        self.loads[name, ON_DEMAND if on_demand else EXPLICIT] += 1
        if not on_demand:
            self.pinned.add(name)
        if self.policy == GDSF:
            self._uses.pop(name, None)
            self._prioritize(name)

    def unloaded(self, name: str, evicted: bool = False) -> None:
        """``name`` no longer holds memory (unloaded by the API or evicted); it is no longer pinned."""
        self.pinned.discard(name)
        self.loaded_at.pop(name, None)
        self.last_used.pop(name, None)
        self._uses.pop(name, None)
        priority = self._priority.pop(name, None)
        if evicted:
            self.evictions[name] += 1
            if priority is not None:
                self._inflation = max(self._inflation, priority)

    def waited(self, name: str, seconds: float, loaded: bool) -> None:
        """A request waited ``seconds`` for an on-demand load of ``name`` (a miss); when the model
        ``loaded`` for it, the request runs next and is not to count as a hit too."""
        self.misses += 1
        if loaded:
            self._owed[name] += 1
        self.waits.observe(seconds)

    def used(self, name: str) -> None:
        """A request runs on ``name`` now: most recently used; a hit unless it waited (a miss)."""
        self.last_used[name] = self.clock()
        if not self.on_demand(name):
            return
        if self.policy == GDSF:
            self._uses[name] += 1
            self._prioritize(name)
        if self._owed[name]:
            self._owed[name] -= 1
        else:
            self.hits += 1

    def _prioritize(self, name: str) -> None:
        """GDSF: ``name``'s priority from its requests since it loaded (at least the one loading it)
        times its load time, over the MiB it holds (host and GPU), on top of the current inflation."""
        size = self.footprints.get(name, 0) + sum(self.gpu_footprints.get(name, ()))
        uses = max(self._uses[name], 1)
        cost = max(self._load_seconds.get(name, 0.0), GDSF_MIN_COST)
        self._priority[name] = self._inflation + uses * cost * (1 << 20) / max(size, GDSF_MIN_SIZE)

    # ---- decisions -----------------------------------------------------------------------------

    def estimate(self, name: str) -> int:
        """What loading ``name`` is expected to add: its last measured footprint, else the mean one."""
        known = self.footprints.get(name)
        if known is not None:
            return known
        measured = list(self.footprints.values())
        return sum(measured) // len(measured) if measured else 0

    @property
    def limited(self) -> bool:
        """Whether any budget applies (otherwise nothing is ever evicted)."""
        return self.budget is not None or self.gpu_budget is not None

    def fits(self, models: Mapping[str, Model], name: str) -> bool:
        """Whether loading ``name`` (its expected footprint) beside the other loaded models and the
        other loads under way stays within the budgets (the host's, and each GPU's)."""
        others = {other: need for other, need in self.reserved.items() if other != name}
        held = memory_used(models, exclude=name) + sum(host for host, _ in others.values())
        if self.budget is not None and held + self.estimate(name) > self.budget:
            return False
        if self.gpu_budget is None:
            return True
        used = [gpu_footprint(model) for other, model in models.items() if other != name]
        need = self.gpu_footprints.get(name, ())
        return all(u <= self.gpu_budget for u in _add(need, *used, *(gpu for _, gpu in others.values())))

    def reserve(self, name: str) -> None:
        """A load of ``name`` found room: hold its expected footprint until :meth:`loaded` or
        :meth:`release`."""
        self.reserved[name] = (self.estimate(name), self.gpu_footprints.get(name, ()))

    def release(self, name: str) -> None:
        """The load of ``name`` ended without completing (or completed): its reservation goes."""
        self.reserved.pop(name, None)

    def over(self, models: Mapping[str, Model]) -> bool:
        """Whether the loaded models, as measured, and the loads under way, as expected, hold more
        than a budget allows."""
        if self.budget is not None:
            if memory_used(models) + sum(host for host, _ in self.reserved.values()) > self.budget:
                return True
        gpu_budget = self.gpu_budget
        if gpu_budget is None:
            return False
        rows = [*(gpu_footprint(m) for m in models.values()), *(gpu for _, gpu in self.reserved.values())]
        return any(used > gpu_budget for used in _add(*rows))

    def victims(self, models: Mapping[str, Model], busy: Iterable[str]) -> list[str]:
        """Evictable models in the policy's order (least recently used first, or lowest GDSF priority
        first): loaded on demand (not pinned), holding instances, past their minimum residency, with
        nothing in flight or queued, and not in ``busy`` (being loaded or unloaded, or the model a load
        makes room for)."""
        now = self.clock()
        excluded = set(busy) | self.pinned
        gdsf = self.policy == GDSF
        candidates: list[tuple[float, float, str]] = []
        for name, model in models.items():
            if name in excluded:
                continue
            serving = model.serving()
            if not serving or any(mv.inflight for mv in serving):
                continue
            loaded = self.loaded_at.get(name)
            if loaded is None or now - loaded < self.min_residency:
                continue
            used = self.last_used.get(name, loaded)
            candidates.append((self._priority.get(name, 0.0) if gdsf else 0.0, used, name))
        return [name for _, _, name in sorted(candidates)]

    def evictable_in(self, models: Mapping[str, Model], busy: Iterable[str]) -> float | None:
        """Seconds until a model that cannot be evicted now may be: the earliest end of a minimum
        residency among the models loaded on demand and not in ``busy`` (0 for one held only by
        requests in flight: they end soon); None when only pinned or busy models hold memory, so
        waiting cannot make room."""
        now = self.clock()
        excluded = set(busy) | self.pinned
        waits = [
            max(0.0, self.loaded_at[name] + self.min_residency - now)
            for name, model in models.items()
            if name not in excluded and name in self.loaded_at and model.serving()
        ]
        return min(waits, default=None)


def memory_used(models: Mapping[str, Model], exclude: str = "") -> int:
    """The measured footprint of every loaded model (but ``exclude``)."""
    return sum(footprint(model) for name, model in models.items() if name != exclude)
