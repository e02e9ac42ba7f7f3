"""Which version a request naming none goes to when a model's versions share its traffic.

A canary rollout sends a share of a model's traffic to a new version (``version_weights``) and a shadow
rollout copies a share to it without answering from it (``mirror``), both set by the load parameters of
:mod:`naiad.repository.overrides`.  The rules are plain functions of the weights and the READY versions,
so the engine's resolution and a frontend worker's copy of the catalog apply the same ones.

A sequence (a request with a correlation id) must stay on one version from its start to its end: its
version is chosen by a hash of the correlation id that is the same in every process and every run
(Python's ``hash`` of a string is not), so every request of the sequence gets the same answer while the
weights and the READY versions stay the same.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Mirror:
    """``percent`` of the requests naming no version are also run on ``version`` (answer dropped)."""

    version: int
    percent: float


def sequence_key(sequence_id: int | str) -> int:
    """A stable 64-bit hash of a correlation id (same in every process, unlike ``hash``)."""
    digest = hashlib.blake2b(str(sequence_id).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def choose(weights: Mapping[int, int], ready: Collection[int], sequence_id: int | str = 0) -> int | None:
    """The version for one request naming none: at random by weight among the READY versions with a
    weight above 0, or by :func:`sequence_key` for a sequence (``sequence_id`` not 0 or "");
    ``None`` when no such version is READY."""
    candidates = [(version, weight) for version, weight in weights.items() if weight > 0 and version in ready]
    if not candidates:
        return None
    total = sum(weight for _, weight in candidates)
    point = sequence_key(sequence_id) % total if sequence_id else random.randrange(total)
    for version, weight in candidates:
        if point < weight:
            return version
        point -= weight
    raise AssertionError("unreachable: point < total")


def heaviest(weights: Mapping[int, int], ready: Collection[int]) -> int | None:
    """The READY version with the largest weight (ties: the highest version): the one that answers
    for the model where no request is routed (readiness, metadata, the model's folder)."""
    candidates = [(weight, version) for version, weight in weights.items() if weight > 0 and version in ready]
    return max(candidates)[1] if candidates else None


def mirrors(mirror: Mirror | None, chosen: int, sequence_id: int | str) -> bool:
    """Whether this request (answered by version ``chosen``) is also copied to the mirror version:
    ``percent`` of them at random, never a sequence's, never onto the version that answers it."""
    if mirror is None or sequence_id or mirror.version == chosen or mirror.percent <= 0:
        return False
    return random.random() * 100 < mirror.percent
