"""Per-model placement (``models[].placement``, issue #25) on the simulated cluster: three real server pods,
a model with ``copies: 1`` held by exactly one of them (each pod's own index says so), requests to every
pod answered (the others forward to the holder, through the peers file the operator writes), an
``onDemand`` model loaded by the pod a request reaches (by servers running with the spec's
``server.minResidencySeconds`` and ``server.evictionPolicy``), and a scale change that keeps one copy.
"""

from __future__ import annotations

import urllib.error
from pathlib import Path
from typing import Any

from tests.operator.cluster import NS, FakeCluster
from tests.operator.harness import (
    GROUP_PATH,
    conditions,
    create_s3_repository,
    eventually,
    index,
    infer_version,
    model_status,
    ready_repository,
    upload,
)
from tests.support.kmock_k8s import ApiServer


def _holders(cluster: FakeCluster, model: str) -> list[str]:
    """The pods whose own index has ``model`` READY (asked of every running pod)."""
    held = []
    for pod in list(cluster.pods.get("vision", [])):
        try:
            states = index(pod.url).get(model, {})
        except OSError:  # a pod starting or going away
            continue
        if any(s == "READY" for s in states.values()):
            held.append(pod.name)
    return sorted(held)


def _one(held: list[str]) -> list[str] | None:
    return held if len(held) == 1 else None


def _settled(api: Any, cluster: FakeCluster, model: str) -> list[str] | None:
    """The one pod holding ``model`` once status names it alone and every pod answers for it (the
    answers forwarded, not loaded: still one holder afterwards)."""
    held = _one(_holders(cluster, model))
    if held is None or [h["pod"] for h in model_status(api, model).get("heldBy") or []] != held:
        return None
    if not _every_pod_answers(cluster, model):
        return None
    return held if _holders(cluster, model) == held else None


def _every_pod_answers(cluster: FakeCluster, model: str) -> bool:
    """Every ready pod answers for ``model`` (until the peers file reaches a pod, it answers 404)."""
    pods = [p for p in cluster.pods.get("vision", []) if p.ready]
    try:
        return bool(pods) and all(infer_version(p.url, model) == "1" for p in pods)
    except urllib.error.HTTPError:
        return False


def test_copies_and_on_demand(s3: Any, api_server: ApiServer, cluster: FakeCluster, operator: Any) -> None:
    api = cluster.api
    upload(s3, "solo", 1)
    upload(s3, "lazy", 1)
    create_s3_repository(api, s3, {"mode": "shared", "accessModes": ["ReadWriteMany"]})
    eventually(lambda: ready_repository(api), what="repository Ready")
    api.create(
        f"{GROUP_PATH}/inferenceservices",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "vision", "namespace": NS},
            "spec": {
                "repository": {"name": "models"},
                "replicas": 3,
                "models": [
                    {"name": "solo", "placement": {"copies": 1}},
                    {"name": "lazy", "placement": "onDemand"},
                ],
                "server": {"minResidencySeconds": 0.5, "evictionPolicy": "gdsf"},
            },
        },
    )
    eventually(lambda: len([p for p in cluster.pods.get("vision", []) if p.ready]) == 3, what="3 pods")
    eventually(
        lambda: conditions(api, "inferenceservices", "vision").get("Ready") == "True", what="service Ready"
    )
    # pods turn Ready one by one and the copy may move to a pod that outranks its first home (loaded
    # there before it goes here): wait until it settled on one pod that every pod's requests reach
    (holder,) = eventually(lambda: _settled(api, cluster, "solo"), what="solo on one pod, answered by all")
    status = eventually(lambda: model_status(api, "solo").get("heldBy"), what="status names the holder")
    assert [h["pod"] for h in status] == [holder]
    assert status[0]["address"].startswith("127.0.0.1:") and status[0]["memoryBytes"] > 0

    # the server processes run with the residency and eviction policy the spec asked for (argv as the
    # kernel holds it)
    for pod in cluster.pods["vision"]:
        argv = Path(f"/proc/{pod.process.pid}/cmdline").read_bytes().split(b"\0")
        assert b"--min-residency-secs=0.5" in argv and b"--load-on-demand=lazy" in argv, argv
        assert b"--eviction-policy=gdsf" in argv, argv

    # onDemand: no pod loads it ahead; the pod a request reaches loads it
    assert _holders(cluster, "lazy") == []
    first = cluster.pods["vision"][0]
    assert infer_version(first.url, "lazy") == "1"
    eventually(lambda: _holders(cluster, "lazy") == [first.name], what="lazy loaded where it was asked")

    # scale in: still exactly one copy, and every pod left answers
    api.patch(f"{GROUP_PATH}/inferenceservices/vision", {"spec": {"replicas": 2}})
    eventually(lambda: len(cluster.pods.get("vision", [])) == 2, what="scaled to 2")
    eventually(lambda: len(_holders(cluster, "solo")) == 1, what="one copy after scale-in")
    eventually(lambda: _every_pod_answers(cluster, "solo"), what="every pod answers after scale-in")
