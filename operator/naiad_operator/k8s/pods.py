"""Server pods: find them, resolve their addresses, and read each one's repository index.

Address resolution is a plain function so tests (and unusual networks) can inject their own; the default
reads the pod's IP and its ``http`` container port, which is also how a test stands a local process in
for a pod: the pod object it creates names that process's address.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from naiad_operator.api.observed import GATE, SNAPSHOT_ANNOTATION, PodCounters, PodObservation, opened_for
from naiad_operator.k8s.client import Kube
from naiad_operator.k8s.errors import APIError
from naiad_operator.k8s.modelserver import ModelServer, ServerCallError
from naiad_operator.k8s.problems import pod_problem

#: pod object -> base URL of its HTTP endpoint, or None while it has none.
PodResolver = Callable[[dict[str, Any]], str | None]


def pod_address(pod: dict[str, Any]) -> str | None:
    return _address(pod, "http", 8000)


def metrics_address(pod: dict[str, Any]) -> str | None:
    """Base URL of the pod's Prometheus endpoint (its ``metrics`` port)."""
    return _address(pod, "metrics", 8002)


def _address(pod: dict[str, Any], name: str, default: int) -> str | None:
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return None
    port = default
    for container in (pod.get("spec") or {}).get("containers") or []:
        for p in container.get("ports") or []:
            if p.get("name") == name:
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


def _condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), None)


def gate_state(pod: dict[str, Any]) -> dict[str, Any]:
    """The readiness-gate fields of a :class:`PodObservation`, from the Pod object alone."""
    spec = pod.get("spec") or {}
    gated = any(g.get("conditionType") == GATE for g in spec.get("readinessGates") or [])
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    server: dict[str, Any] = next((c for c in statuses if c.get("name") == "server"), {})
    restarts = int(server.get("restartCount") or 0)
    containers = _condition(pod, "ContainersReady")
    if containers is not None:
        containers_ready = containers.get("status") == "True" and not pod["metadata"].get("deletionTimestamp")
    else:
        containers_ready = pod_ready(pod)
    gate = _condition(pod, GATE) or {}
    return {
        "containers_ready": containers_ready,
        "gated": gated,
        "gate_set": gate.get("status") == "True",
        "gate_open": opened_for(gate) == restarts,
        "restarts": restarts,
    }


async def confirmed(kube: Kube, pods: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``pods`` (from the watches' cache), with each one that looks held out by its gate read again
    live: the operator loads such a pod as one out of the Service (a ``perPod`` model is unloaded
    first), which a gate opened moments ago and not yet in the cache would turn into failed requests."""
    result = []
    for pod in pods:
        if describe(pod).preparing:
            meta = pod["metadata"]
            pod = await kube.get("v1", "Pod", meta["namespace"], meta["name"]) or pod
        result.append(pod)
    return result


def describe(pod: dict[str, Any]) -> PodObservation:
    """A pod as its object alone tells (no index): enough to decide about its gate."""
    return PodObservation(pod["metadata"]["name"], None, pod_ready(pod), **gate_state(pod))


async def set_gate(kube: Kube, pod: dict[str, Any], condition: dict[str, Any]) -> bool:
    """Write the gate condition with a JSON patch whose ``test`` pins the list entry it replaces (the
    kubelet writes the same list); False when the pod changed under us or is gone (the next pass
    decides again)."""
    meta = pod["metadata"]
    conditions = (pod.get("status") or {}).get("conditions")
    operations: list[dict[str, Any]]
    if conditions is None:
        operations = [{"op": "add", "path": "/status/conditions", "value": [condition]}]
    else:
        at = next((i for i, c in enumerate(conditions) if c.get("type") == GATE), None)
        if at is None:
            operations = [
                {"op": "test", "path": "/status/conditions", "value": conditions},
                {"op": "add", "path": "/status/conditions/-", "value": condition},
            ]
        else:
            operations = [
                {"op": "test", "path": f"/status/conditions/{at}/type", "value": GATE},
                {"op": "replace", "path": f"/status/conditions/{at}", "value": condition},
            ]
    try:
        await kube.json_patch("v1", "Pod", meta["namespace"], meta["name"], operations, subresource="status")
    except APIError:
        return False
    return True


async def observe(
    server: ModelServer,
    pods: Sequence[dict[str, Any]],
    resolve: PodResolver = pod_address,
    events: Mapping[str, Sequence[dict[str, Any]]] | None = None,
    memory: bool = False,
) -> list[PodObservation]:
    """Each pod's readiness and index, read concurrently; a pod that does not answer is "not reporting"
    rather than "empty", so status never claims a model vanished because a call timed out. ``memory``
    also reads what each loaded model version weighs, from the pod's metrics."""

    async def one(pod: dict[str, Any]) -> PodObservation:
        name, url, ready = pod["metadata"]["name"], resolve(pod), pod_ready(pod)
        snapshot = (pod["metadata"].get("annotations") or {}).get(SNAPSHOT_ANNOTATION)
        problem = None if ready else pod_problem(pod, (events or {}).get(name, ()))
        metrics = metrics_address(pod)
        gate = gate_state(pod)
        if url is None:
            return PodObservation(name, None, ready, snapshot=snapshot, problem=problem, **gate)
        peer = pod_peer(pod)
        try:
            models, held = await server.index_with_memory(url)
        except ServerCallError as exc:
            error = exc.message
            return PodObservation(
                name,
                url,
                ready,
                index_error=error,
                snapshot=snapshot,
                problem=problem,
                metrics_url=metrics,
                peer=peer,
                **gate,
            )
        weights: dict[str, dict[int, int]] = {}
        if memory and metrics is not None:
            try:
                weights = await server.memory(metrics)
            except ServerCallError:
                weights = {}
        return PodObservation(
            name,
            url,
            ready,
            models,
            snapshot=snapshot,
            problem=problem,
            metrics_url=metrics,
            memory=weights,
            peer=peer,
            held_bytes=held,
            **gate,
        )

    return list(await asyncio.gather(*(one(p) for p in pods)))


async def scrape(server: ModelServer, pods: Sequence[PodObservation]) -> dict[str, PodCounters]:
    """Every reporting pod's per-version counters; a pod whose ``/metrics`` does not answer is left
    out (its traffic is missing from the window, never invented)."""

    async def one(pod: PodObservation) -> tuple[str, PodCounters | None]:
        if pod.metrics_url is None:
            return pod.name, None
        try:
            return pod.name, await server.counters(pod.metrics_url)
        except ServerCallError:
            return pod.name, None

    found = await asyncio.gather(*(one(p) for p in pods if p.reporting))
    return {name: counters for name, counters in found if counters is not None}
