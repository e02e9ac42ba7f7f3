"""Does a child object need writing? Compare what we want with what the API server holds.

A level-triggered operator re-derives every child on every pass; writing each one back every time would
turn a quiet fleet into a steady stream of PATCHes. We write only when the desired object's hash differs
from the one we stamped on the last write, or when someone changed a field we own (drift). The API server
adds defaults (strategy, terminationMessagePath...) and normalizes quantities ("1000m" is "1"), so
"matches" means: every field we set is there with an equal value, extra fields are fine.
"""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from naiad_operator.reconcile.names import HASH_ANNOTATION

_SUFFIXES: dict[str, Decimal | int] = {
    "": 1,
    "m": Decimal("0.001"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")


def desired_hash(obj: dict[str, Any]) -> str:
    """A stable hash of an object as we render it (before the hash annotation is added)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def stamp(obj: dict[str, Any]) -> dict[str, Any]:
    """The object with its own hash in an annotation, ready to apply."""
    digest = desired_hash(obj)
    meta = obj.setdefault("metadata", {})
    meta.setdefault("annotations", {})[HASH_ANNOTATION] = digest
    return obj


def needs_apply(desired: dict[str, Any], observed: dict[str, Any] | None) -> bool:
    """True when ``observed`` is missing, was written from another rendering, or drifted from ``desired``."""
    if observed is None:
        return True
    wanted = desired.get("metadata", {}).get("annotations", {}).get(HASH_ANNOTATION)
    seen = (observed.get("metadata", {}).get("annotations") or {}).get(HASH_ANNOTATION)
    if wanted is None or wanted != seen:
        return True
    body = {k: v for k, v in desired.items() if k not in ("metadata", "apiVersion", "kind", "status")}
    return not contains(observed, body)


def contains(observed: Any, desired: Any) -> bool:
    """Every field of ``desired`` is in ``observed`` with an equal value (lists element by element)."""
    if isinstance(desired, dict):
        return isinstance(observed, dict) and all(
            k in observed and contains(observed[k], v) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(observed, list)
            and len(observed) == len(desired)
            and all(contains(o, d) for o, d in zip(observed, desired, strict=True))
        )
    if isinstance(desired, str) and isinstance(observed, str | int) and desired != str(observed):
        return _same_quantity(desired, str(observed))
    return bool(observed == desired)


def _same_quantity(a: str, b: str) -> bool:
    qa, qb = _quantity(a), _quantity(b)
    return qa is not None and qa == qb


def quantity_bytes(value: str | int | None) -> int | None:
    """A Kubernetes quantity (``32Gi``, ``500M``, ``1e9``) as a whole number; None when absent or bad."""
    if value is None:
        return None
    amount = _quantity(str(value))
    return int(amount) if amount is not None else None


def _quantity(text: str) -> Decimal | None:
    match = _QUANTITY.match(text)
    if match is None:
        return None
    try:
        return Decimal(match.group(1)) * _SUFFIXES[match.group(2) or ""]
    except InvalidOperation:
        return None


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) turning ``old`` into ``new``; empty when they are equal, which
    is how a pass that changed nothing writes nothing."""
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            sub = merge_patch(before, value)
            if sub:
                patch[key] = sub
        elif key not in old or before != value:
            patch[key] = value
    return patch
