"""Server pods: find them, resolve their addresses, and read each one's repository index.

Address resolution is a plain function so tests (and unusual networks) can inject their own; the default
reads the pod's IP and its ``http`` container port, which is also how a test stands a local process in
for a pod: the pod object it creates names that process's address.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from naiad_operator.api.observed import SNAPSHOT_ANNOTATION, PodObservation
from naiad_operator.k8s.modelserver import ModelServer, ServerCallError
from naiad_operator.k8s.problems import pod_problem

#: pod object -> base URL of its HTTP endpoint, or None while it has none.
PodResolver = Callable[[dict[str, Any]], str | None]


def pod_address(pod: dict[str, Any]) -> str | None:
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return None
    port = 8000
    for container in (pod.get("spec") or {}).get("containers") or []:
        for p in container.get("ports") or []:
            if p.get("name") == "http":
                port = int(p["containerPort"])
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}"


def pod_peer(pod: dict[str, Any]) -> str | None:
    """``host:httpport:grpcport`` of the pod (its IP and ``http``/``grpc`` container ports), as the
    peers file names servers; None while it has no IP."""
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return None
    ports = {"http": 8000, "grpc": 8001}
    for container in (pod.get("spec") or {}).get("containers") or []:
        for p in container.get("ports") or []:
            if p.get("name") in ports:
                ports[p["name"]] = int(p["containerPort"])
    host = f"[{ip}]" if ":" in ip else ip
    return f"{host}:{ports['http']}:{ports['grpc']}"


def pod_ready(pod: dict[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def observe(
    server: ModelServer,
    pods: Sequence[dict[str, Any]],
    resolve: PodResolver = pod_address,
    events: Mapping[str, Sequence[dict[str, Any]]] | None = None,
) -> list[PodObservation]:
    """Each pod's readiness and index, read concurrently; a pod that does not answer is "not reporting"
    rather than "empty", so status never claims a model vanished because a call timed out."""

    async def one(pod: dict[str, Any]) -> PodObservation:
        name, url, ready = pod["metadata"]["name"], resolve(pod), pod_ready(pod)
        snapshot = (pod["metadata"].get("annotations") or {}).get(SNAPSHOT_ANNOTATION)
        problem = None if ready else pod_problem(pod, (events or {}).get(name, ()))
        if url is None:
            return PodObservation(name, None, ready, snapshot=snapshot, problem=problem)
        peer = pod_peer(pod)
        try:
            models, memory = await server.index_with_memory(url)
        except ServerCallError as exc:
            error = exc.message
            return PodObservation(
                name, url, ready, index_error=error, snapshot=snapshot, problem=problem, peer=peer
            )
        return PodObservation(
            name, url, ready, models, snapshot=snapshot, problem=problem, peer=peer, memory=memory
        )

    return list(await asyncio.gather(*(one(p) for p in pods)))
