"""The operator's readiness gate on server pods: a pod joins the Service only once it serves what the
fleet serves.

A server pod loads its models itself at start (``--load-model``), from ``config.pbtxt`` and the newest
content on the claim: without the spec's ``configOverride``, without the pinned default version, and in
the middle of a rollout possibly a version the fleet has not switched to yet. Strict readiness alone
would put it in the Service's endpoints as soon as those loads finished. The Deployment therefore lists a
readiness gate (``spec.readinessGates``) whose condition only the operator sets: the kubelet counts the pod
Ready once its container is ready *and* the condition is True. The operator loads the pod's models with
override and pin, then opens the gate; it closes the gate when the container stops being ready (a
restart starts over from ``--load-model``), and to take one pod out of the endpoints for a ``perPod``
rollout.

The condition records the container start (``restartCount``) it was opened for, so a restart the operator
did not see happen still counts as a closed gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from naiad_operator.api.observed import GATE, PodObservation, gate_message


def gate_condition(open_: bool, restarts: int, reason: str, now: str) -> dict[str, Any]:
    """The pod condition the operator writes; its message names the container start it holds for."""
    return {
        "type": GATE,
        "status": "True" if open_ else "False",
        "reason": reason,
        "message": gate_message(open_, restarts),
        "lastTransitionTime": now,
    }


def to_close(pods: Sequence[PodObservation]) -> list[PodObservation]:
    """Pods whose gate says True while their container is not ready or was restarted since: closed at
    once (outside any rollout), so the restarted server does not join the Service with what it loaded at
    start."""
    return [p for p in pods if p.gated and p.gate_set and (not p.containers_ready or not p.gate_open)]
