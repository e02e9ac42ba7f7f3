"""Leader election on a ``coordination.k8s.io/v1`` Lease, decided as data: who holds it, may we take it,
and what the Lease says once we hold it.

kopf's peering is not leader election (equal-priority peers freeze each other), so replicas of the
operator agree through a Lease as client-go's leader election does: the holder renews ``renewTime``
every few seconds; anyone else may take the Lease once ``renewTime + leaseDurationSeconds`` has passed.
Writes are conditional on the ``resourceVersion`` read (``k8s.lease``), so two candidates cannot both
win one expiry.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    holder: str
    renewed: datetime | None
    duration: float
    transitions: int
    acquired: str | None


def parse(spec: dict[str, Any] | None) -> LeaseRecord:
    spec = spec or {}
    renewed = spec.get("renewTime")
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        renewed=_parse_time(renewed) if renewed else None,
        duration=float(spec.get("leaseDurationSeconds") or 0),
        transitions=int(spec.get("leaseTransitions") or 0),
        acquired=spec.get("acquireTime"),
    )


def may_hold(record: LeaseRecord, me: str, now: datetime) -> bool:
    """Whether ``me`` may write itself into the Lease now: it holds it already, nobody does, or the
    holder's lease ran out without a renewal."""
    if not record.holder or record.holder == me or record.renewed is None:
        return True
    return now > record.renewed + timedelta(seconds=record.duration)


def held_spec(record: LeaseRecord, me: str, now: datetime, duration: float) -> dict[str, Any]:
    """The Lease's spec with ``me`` holding it from ``now``; a new holder counts a transition."""
    stamp = format_micro(now)
    taking = record.holder != me
    return {
        "holderIdentity": me,
        "leaseDurationSeconds": max(1, round(duration)),
        "acquireTime": stamp if taking or not record.acquired else record.acquired,
        "renewTime": stamp,
        "leaseTransitions": record.transitions + (1 if taking and record.holder else 0),
    }


def format_micro(moment: datetime) -> str:
    """A Kubernetes MicroTime."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
