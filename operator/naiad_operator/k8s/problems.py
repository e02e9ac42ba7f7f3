"""Why a pod is not running: read from the pod's own status and, while it waits for its volumes, from
the Events the kubelet and the attach controller post about it.

The reasons are the ones a platform team meets first on a new cluster, in the words Kubernetes uses:
the scheduler's ``Unschedulable`` (``InsufficientGPU`` when what is missing is a GPU, ``ClaimPending``
when the pod's claim cannot bind), a container
waiting in ``ImagePullBackOff``/``ErrImagePull``/``CrashLoopBackOff`` (with the last termination
message: the server writes its last error there), a volume that cannot be mounted (``FailedMount``) or
attached to a second node (``MultiAttach``). Volume trouble is only in Events, so Events are read only
for pods that wait for their volumes, never on every pass for every pod.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from naiad_operator.api.observed import PodProblem
from naiad_operator.k8s.client import Kube

#: Waiting reasons that mean the container cannot start as it is (not a normal step of starting).
STUCK = frozenset(
    {
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
#: Waiting reasons while the kubelet prepares the pod, volumes included.
PREPARING = frozenset({"ContainerCreating", "PodInitializing"})
#: Init containers the operator renders; the first word of their termination message is the reason.
OWN_INIT = frozenset({"repository"})
GPU = re.compile(r"Insufficient [a-z0-9.\-]+/(gpu|mig-[a-z0-9.\-]+)")
MESSAGE_LIMIT = 500


def waiting_for_volumes(pod: dict[str, Any]) -> bool:
    """Scheduled, not running yet, and some container still being created: the state in which the
    kubelet or the attach controller say in Events why a volume did not come."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return False
    scheduled = any(
        c.get("type") == "PodScheduled" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    waiting = [
        ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    ]
    return scheduled and any(w in PREPARING for w in waiting)


async def volume_events(
    kube: Kube, namespace: str, pods: Sequence[dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """Events about each pod that waits for its volumes (one list call per such pod), by pod name."""
    result: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        if waiting_for_volumes(pod):
            name = pod["metadata"]["name"]
            events = await kube.list(
                "v1", "Event", namespace, fields={"involvedObject.kind": "Pod", "involvedObject.name": name}
            )
            result[name] = events
    return result


def pod_problem(pod: dict[str, Any], events: Sequence[dict[str, Any]] = ()) -> PodProblem | None:
    """The first thing keeping ``pod`` from running, or None (running, or starting normally)."""
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            message = cond.get("message") or "no node fits the pod"
            reason = cond.get("reason") or "Unschedulable"
            if GPU.search(message):
                reason = "InsufficientGPU"
            elif "unbound" in message and "PersistentVolumeClaim" in message:
                reason = "ClaimPending"  # no StorageClass fits the claim's access modes, or none is default
            return PodProblem(reason, _cut(message))
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason") or ""
        if reason not in STUCK:
            continue
        last = ((cs.get("lastState") or {}).get("terminated") or {}).get("message") or ""
        if cs.get("name") in OWN_INIT and re.match(r"^[A-Z][A-Za-z]+: ", last):
            reason = last.split(":", 1)[0]
        # a log tail's last words are the error (argparse prints its usage first)
        last = " ".join(last.split())
        last = last if len(last) <= MESSAGE_LIMIT // 2 else "…" + last[-(MESSAGE_LIMIT // 2) :]
        detail = " ".join(p for p in (waiting.get("message") or "", last) if p)
        return PodProblem(reason, _cut(f"container {cs.get('name')}: {detail or reason}"))
    for event in sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or "")):
        message = event.get("message") or ""
        if event.get("reason") == "FailedAttachVolume" and "Multi-Attach" in message:
            return PodProblem("MultiAttach", _cut(message))
        if event.get("reason") in ("FailedMount", "FailedAttachVolume"):
            return PodProblem(str(event["reason"]), _cut(message))
    return None


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"
