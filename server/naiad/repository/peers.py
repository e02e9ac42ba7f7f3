"""Which other servers hold which models warm: the peers file (``--peers-file``).

When an InferenceService places a model on only some of its pods, a request may reach a pod that does
not hold it.  The operator writes, into a file mounted in every pod, which pods hold each model
(``{"models": {"<model>": ["host:httpport:grpcport", ...]}}``); a server that gets a request for a
model it does not serve forwards it to one of them (the frontends do the forwarding, the data plane
decides: see :meth:`naiad.dataplane.DataPlane.peer`).  The file changes as pods come and go, so it is
read again whenever its modification time changes, checked at most once a second, when a request for
a model not served here asks; a file that cannot be read or parsed keeps the last table in force.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

log = logging.getLogger("naiad.peers")

#: Seconds between two looks at the file's modification time.
POLL_SECS = 1.0
#: The request header (gRPC metadata key) a forwarded request carries: it is never forwarded again.
FORWARDED_HEADER = "naiad-forwarded"


@dataclass(frozen=True, slots=True)
class Peer:
    """One server that holds a model: its host and its HTTP and gRPC ports."""

    host: str
    http_port: int
    grpc_port: int

    @property
    def http_address(self) -> str:
        return f"{_bracketed(self.host)}:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"{_bracketed(self.host)}:{self.grpc_port}"

    @classmethod
    def parse(cls, text: str) -> Peer:
        """``host:httpport:grpcport`` (an IPv6 host in brackets); ``ValueError`` otherwise."""
        host, _, ports = text.strip().rpartition(":")
        host, _, http = host.rpartition(":")
        if not host or not http.isdigit() or not ports.isdigit():
            raise ValueError(f"expected 'host:httpport:grpcport', got '{text}'")
        return cls(host.strip("[]"), int(http), int(ports))


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class Peers:
    """The peers table of one server process, kept in step with the file; counts forwarded requests."""

    def __init__(
        self, path: Path | None, *, clock: Callable[[], float] = time.monotonic, poll_secs: float = POLL_SECS
    ) -> None:
        """``path``: the peers file (``None``: no peers, nothing is ever forwarded)."""
        self.path = path
        self._clock = clock
        self._poll_secs = poll_secs
        self._checked = -poll_secs
        self._mtime: int | None = None
        self._table: dict[str, tuple[Peer, ...]] = {}
        self._turns: dict[str, Iterator[int]] = {}
        #: Requests forwarded to a peer, by model (``naiad_forwarded_requests_total``).
        self.forwarded: Counter[str] = Counter()

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def holders(self, name: str) -> tuple[Peer, ...]:
        """The peers that hold ``name`` now, as the file last said."""
        self._refresh()
        return self._table.get(name, ())

    def choose(self, name: str) -> Peer | None:
        """The next peer holding ``name``, round robin; ``None`` when none does."""
        holders = self.holders(name)
        if not holders:
            return None
        turn = self._turns.get(name)
        if turn is None:
            turn = self._turns[name] = itertools.count()
        return holders[next(turn) % len(holders)]

    def count(self, name: str) -> None:
        """A request for ``name`` was forwarded."""
        self.forwarded[name] += 1

    def _refresh(self) -> None:
        if self.path is None:
            return
        now = self._clock()
        if now - self._checked < self._poll_secs:
            return
        self._checked = now
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError:
            mtime = None
        if mtime == self._mtime:
            return
        self._mtime = mtime
        if mtime is None:
            log.warning("peers file %s is gone: no model is forwarded", self.path)
            self._table = {}
            return
        try:
            self._table = parse(self.path.read_bytes())
        except (OSError, ValueError) as error:
            log.warning("peers file %s not applied, keeping the previous one: %s", self.path, error)
            return
        self._turns = {name: turn for name, turn in self._turns.items() if name in self._table}


def parse(content: bytes) -> dict[str, tuple[Peer, ...]]:
    """The table in a peers file; ``ValueError`` (or :class:`orjson.JSONDecodeError`) if malformed."""
    document = orjson.loads(content)
    models = document.get("models") if isinstance(document, dict) else None
    if not isinstance(models, dict):
        raise ValueError('expected {"models": {"<model>": ["host:httpport:grpcport", ...]}}')
    table: dict[str, tuple[Peer, ...]] = {}
    for name, peers in models.items():
        if not isinstance(peers, list) or not all(isinstance(p, str) for p in peers):
            raise ValueError(f"model '{name}': expected a list of 'host:httpport:grpcport' strings")
        table[name] = tuple(Peer.parse(p) for p in peers)
    return table
