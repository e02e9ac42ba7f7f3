"""Conditions with honest transition times.

kopf does not manage conditions (kopf#796), so we do: a condition's ``lastTransitionTime`` changes only
when its status flips, never on a re-write with the same status, so ``kubectl describe`` shows when the
truth last changed, and a status computed twice from the same observations is byte-identical (which is
what keeps a steady-state pass from writing anything).
"""

from __future__ import annotations

from naiad_operator.api.base import Condition, ConditionStatus


def condition(
    type_: str, ok: bool | None, reason: str, message: str = "", generation: int | None = None
) -> Condition:
    status = ConditionStatus.UNKNOWN if ok is None else ConditionStatus.TRUE if ok else ConditionStatus.FALSE
    return Condition(
        type=type_, status=status, reason=reason, message=message, observed_generation=generation
    )


def merge_conditions(previous: list[Condition], current: list[Condition], now: str) -> list[Condition]:
    """``current`` in order, each keeping the previous transition time when its status did not change."""
    before = {c.type: c for c in previous}
    merged: list[Condition] = []
    for cond in current:
        old = before.get(cond.type)
        kept = old.last_transition_time if old is not None and old.status == cond.status else None
        merged.append(cond.model_copy(update={"last_transition_time": kept or now}))
    return merged
