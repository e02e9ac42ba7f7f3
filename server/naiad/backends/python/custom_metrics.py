"""Custom metrics of Python models (``pb_utils.MetricFamily``), as Triton's Python backend offers them.

A model creates families (counter, gauge or histogram, shared by name) and metrics in them (one per
label set, shared too); the server exports them on ``/metrics`` beside its own.  Each process keeps
the metrics its models write in a :class:`MetricStore`: reading a value is local, and writing one is
a few arithmetic operations under a lock.  A model process hands its store to the engine as a
snapshot through its side channel (see :mod:`naiad.backends.python.logrelay`), only after a change:
when a scrape of ``/metrics`` asks (so a scrape shows every change made before it, as Triton's, whose
stubs write to the server's metrics directly), and otherwise at most every :data:`FLUSH_S` seconds, so
that a model that counts every request pays no message per request.  The engine's
:class:`CustomMetrics` holds its own store (models running in the server) and the latest snapshot of
each model instance's process: a model's families leave ``/metrics`` with it (and a model process
that crashed takes its values along, as a Triton stub does).
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import enum
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

#: How long a model process gathers changes before sending them unasked.
FLUSH_S = 0.1

Labels = tuple[tuple[str, str], ...]

#: The model instance whose ``initialize`` runs now (see :meth:`MetricStore.owned_by`).
_OWNER: contextvars.ContextVar[int | None] = contextvars.ContextVar("naiad_metrics_owner", default=None)


class MetricKind(enum.IntEnum):
    """``pb_utils.MetricFamily.COUNTER``, ``GAUGE`` and ``HISTOGRAM``."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


_UNSUPPORTED = "Unsupported TRITONSERVER_MetricKind"


@dataclass
class Series:
    """One metric: a label set's value, or a histogram's bucket counts, sum and count."""

    labels: Labels
    buckets: tuple[float, ...] | None
    value: float = 0.0
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    observed: int = 0
    users: int = 0


@dataclass
class Family:
    """A family and its metrics by label set; ``users`` counts the ``MetricFamily`` objects sharing it."""

    name: str
    description: str
    kind: MetricKind
    series: dict[Labels, Series] = field(default_factory=dict)
    users: int = 0
    #: How many of ``users`` each model instance made while it initialized.
    owners: collections.Counter[int] = field(default_factory=collections.Counter)


#: What a store exports: (name, description, kind, series) per family.
Snapshot = list[tuple[str, str, int, list[Series]]]


class MetricStore:
    """The custom metrics of one process; ``changed`` is called after each change (from any thread)."""

    def __init__(self, changed: Callable[[], None] | None = None) -> None:
        self._families: dict[str, Family] = {}
        self._lock = threading.Lock()
        self._changed = changed

    def family(self, name: str, description: str, kind: MetricKind) -> Family:
        """The family called ``name``, created or shared (a second description is ignored, as in
        Triton; another kind is an error)."""
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = Family(name, description, MetricKind(kind))
            elif family.kind != kind:
                kinds = f"{family.kind.name}, not {MetricKind(kind).name}"
                raise ValueError(f"metric family '{name}' already exists with kind {kinds}")
            family.users += 1
            owner = _OWNER.get()
            if owner is not None:
                family.owners[owner] += 1
        self._notify()
        return family

    @contextlib.contextmanager
    def owned_by(self, owner: int) -> Iterator[None]:
        """Families created meanwhile belong to ``owner`` (a model instance in this process, while
        it initializes), so that :meth:`release_owner` takes them away when it closes, whether or
        not the model's objects are freed then."""
        token = _OWNER.set(owner)
        try:
            yield
        finally:
            _OWNER.reset(token)

    def release_owner(self, owner: int) -> None:
        """``owner`` closed: its families leave (a family other instances use stays for them)."""
        with self._lock:
            for name, family in list(self._families.items()):
                count = family.owners.pop(owner, 0)
                family.users -= count
                if count and family.users <= 0:
                    del self._families[name]
        self._notify()

    def release_family(self, family: Family) -> None:
        """A ``MetricFamily`` object went away: the family leaves with the last one."""
        with self._lock:
            family.users -= 1
            if family.users <= 0 and self._families.get(family.name) is family:
                del self._families[family.name]
        self._notify()

    def series(self, family: Family, labels: Mapping[str, str], buckets: Sequence[float] | None) -> Series:
        """The metric of ``family`` with ``labels``, created or shared."""
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = family.series.get(key)
            if series is None:
                bounds = None if buckets is None else tuple(float(b) for b in buckets)
                series = family.series[key] = Series(key, bounds, counts=[0] * len(bounds or ()))
            series.users += 1
        self._notify()
        return series

    def release_series(self, family: Family, series: Series) -> None:
        with self._lock:
            series.users -= 1
            if series.users <= 0 and family.series.get(series.labels) is series:
                del family.series[series.labels]
        self._notify()

    def increment(self, family: Family, series: Series, value: float) -> None:
        if family.kind == MetricKind.HISTOGRAM:
            raise ValueError(_UNSUPPORTED)
        if family.kind == MetricKind.COUNTER and value < 0:
            raise ValueError(
                "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
                "non-negative values."
            )
        with self._lock:
            series.value += value
        self._notify()

    def set(self, family: Family, series: Series, value: float) -> None:
        if family.kind == MetricKind.COUNTER:
            raise ValueError("TRITONSERVER_METRIC_KIND_COUNTER does not support Set")
        if family.kind == MetricKind.HISTOGRAM:
            raise ValueError(_UNSUPPORTED)
        with self._lock:
            series.value = value
        self._notify()

    def observe(self, family: Family, series: Series, value: float) -> None:
        if family.kind != MetricKind.HISTOGRAM or series.buckets is None:
            raise ValueError(_UNSUPPORTED)
        with self._lock:
            for index, bound in enumerate(series.buckets):
                if value <= bound:
                    series.counts[index] += 1
            series.total += value
            series.observed += 1
        self._notify()

    def value(self, family: Family, series: Series) -> float:
        if family.kind == MetricKind.HISTOGRAM:
            raise ValueError(_UNSUPPORTED)
        return series.value

    def snapshot(self) -> Snapshot:
        """A copy of every family, to export or send."""
        with self._lock:
            return [
                (
                    family.name,
                    family.description,
                    int(family.kind),
                    [
                        Series(s.labels, s.buckets, s.value, list(s.counts), s.total, s.observed)
                        for s in family.series.values()
                    ],
                )
                for family in self._families.values()
            ]

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed()


class Publisher:
    """In a model process: a store whose changes reach the engine as snapshots, at most every
    :data:`FLUSH_S` seconds, from a thread that sleeps while nothing changes."""

    def __init__(self, send: Callable[[tuple[str, Snapshot]], None]) -> None:
        self._send = send
        self._changed = threading.Event()
        self._sending = threading.Lock()  # (a snapshot taken first goes first)
        self.store = MetricStore(self._changed.set)
        threading.Thread(target=self._run, name="naiad-metrics", daemon=True).start()

    def _run(self) -> None:
        while True:
            self._changed.wait()
            time.sleep(FLUSH_S)  # gather the changes of this while into one message
            self.send_changes()

    def send_changes(self) -> None:
        """Send the store if it changed since it was last sent (the engine asks before a scrape)."""
        with self._sending:
            if self._changed.is_set():
                self._changed.clear()
                self._send(("metrics", self.store.snapshot()))


class CustomMetrics:
    """The engine's view: its own store and the last snapshot of each model process.

    Series with the same family and labels in several processes (a model with several instances)
    are added up: counters and histograms count every instance's events; a gauge shows the sum too.
    """

    def __init__(self) -> None:
        self.local = MetricStore()
        self._sources: dict[int, Callable[[], Snapshot | None]] = {}
        self._askers: dict[int, Callable[[], Future[Any]]] = {}
        self._lock = threading.Lock()

    def attach(self, key: int, source: Callable[[], Snapshot | None], ask: Callable[[], Future[Any]]) -> None:
        """Export what ``source`` returns (a model instance's process's latest snapshot); ``ask``
        has the process send what changed since, done once it did (see :meth:`ask_changes`)."""
        with self._lock:
            self._sources[key] = source
            self._askers[key] = ask

    def detach(self, key: int) -> None:
        """The instance closed: its families leave ``/metrics``."""
        with self._lock:
            self._sources.pop(key, None)
            self._askers.pop(key, None)

    def ask_changes(self) -> list[Future[Any]]:
        """Have every model process send what changed since its last snapshot; done as each did."""
        with self._lock:
            askers = list(self._askers.values())
        return [ask() for ask in askers]

    def families(self) -> Snapshot:
        """Every family, series of the same labels added up."""
        with self._lock:
            sources = list(self._sources.values())
        snapshots = [self.local.snapshot(), *(snapshot for source in sources if (snapshot := source()))]
        merged: dict[str, tuple[str, str, int, dict[Labels, Series]]] = {}
        for snapshot in snapshots:
            for name, description, kind, series in snapshot:
                entry = merged.setdefault(name, (name, description, kind, {}))
                for one in series:
                    into = entry[3].get(one.labels)
                    if into is None:
                        entry[3][one.labels] = Series(
                            one.labels, one.buckets, one.value, list(one.counts), one.total, one.observed
                        )
                    elif into.buckets == one.buckets:
                        into.value += one.value
                        into.counts = [a + b for a, b in zip(into.counts, one.counts, strict=True)]
                        into.total += one.total
                        into.observed += one.observed
        return [
            (name, description, kind, list(series.values()))
            for name, description, kind, series in merged.values()
        ]


def bound(value: float) -> str:
    """A bucket's ``le`` label as Triton prints it (``1``, ``2.5``, ``+Inf``)."""
    if math.isinf(value):
        return "+Inf"
    return str(int(value)) if float(value).is_integer() else repr(value)
