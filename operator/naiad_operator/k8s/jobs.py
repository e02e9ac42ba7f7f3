"""Sync Jobs: read a Job's outcome and its pod's termination message (the sync summary)."""

from __future__ import annotations

from typing import Any

from naiad_operator.api.observed import JobObservation
from naiad_operator.k8s.cache import Cache
from naiad_operator.k8s.problems import pod_problem, volume_events


async def observe_job(cache: Cache, namespace: str, name: str) -> JobObservation | None:
    """None when the Job is gone. The message comes from the newest pod that terminated."""
    job = await cache.get("batch/v1", "Job", namespace, name)
    if job is None:
        return None
    status = job.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    succeeded = bool(status.get("succeeded")) or conditions.get("Complete") == "True"
    failed = conditions.get("Failed") == "True"
    pods = await cache.pods_of_job(namespace, name)
    message = _termination_message(pods) if succeeded or failed else None
    if (succeeded or failed) and message is None:  # the watch may deliver the Job before its pod
        message = _termination_message(await cache.kube.list("v1", "Pod", namespace, {"job-name": name}))
    problem = None
    if not (succeeded or failed):
        events = await volume_events(cache.kube, namespace, pods)
        found = (pod_problem(pod, events.get(pod["metadata"]["name"], ())) for pod in pods)
        problem = next((p for p in found if p is not None), None)
    return JobObservation(
        name=name,
        succeeded=succeeded,
        failed=failed,
        start_time=status.get("startTime"),
        completion_time=status.get("completionTime"),
        message=message,
        problem=problem,
    )


def _termination_message(pods: list[dict[str, Any]]) -> str | None:
    finished: list[tuple[str, str]] = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (cs.get("state") or {}).get("terminated") or {}
            if terminated.get("message"):
                finished.append((terminated.get("finishedAt") or "", terminated["message"]))
    return max(finished)[1] if finished else None
