"""Copies that follow the load (``placement: {copies, maxCopies, targetRequestsPerSecond}``, issue #25) on
the simulated cluster: two real server pods, a model held by one of them; requests to it make the
operator load it on the second (that pod's own index says READY) and report the rate in status; once the
requests stop, the second copy stays for the scale-down delay and then goes.
"""

from __future__ import annotations

import time
from typing import Any

from tests.operator.cluster import NS, FakeCluster
from tests.operator.harness import (
    GROUP_PATH,
    Prober,
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

DELAY = 4  # scaleDownDelaySeconds: short, so the test waits little for the copy to go


def _holders(cluster: FakeCluster) -> list[str]:
    """The pods whose own index has ``hot`` READY (asked of every running pod)."""
    held = []
    for pod in list(cluster.pods.get("vision", [])):
        try:
            states = index(pod.url).get("hot", {})
        except OSError:  # a pod starting or going away
            continue
        if any(s == "READY" for s in states.values()):
            held.append(pod.name)
    return sorted(held)


def _status_holders(api: Any) -> list[str]:
    return sorted(h["pod"] for h in model_status(api, "hot").get("heldBy") or [])


def _settled(api: Any, cluster: FakeCluster, copies: int) -> dict[str, Any] | None:
    """``hot``'s status once ``copies`` pods hold it, by their own indexes and by status alike."""
    held = _holders(cluster)
    record = model_status(api, "hot")
    if len(held) != copies or _status_holders(api) != held or record.get("targetCopies") != copies:
        return None
    # the pods chosen (counted only among pods Ready at that pass: a probe missed under load counts less)
    return record if record["copies"]["desired"] == copies else None


def _idle(api: Any, cluster: FakeCluster) -> dict[str, Any] | None:
    first = _settled(api, cluster, 1)
    if first is None or "requestsPerSecond" not in first:
        return None
    time.sleep(3)  # three reconcile intervals of the tests' operator
    again = _settled(api, cluster, 1)
    return again if again is not None and again["heldBy"] == first["heldBy"] else None


def test_copies_grow_with_load_and_shrink_after_the_delay(
    s3: Any, api_server: ApiServer, cluster: FakeCluster, operator: Any
) -> None:
    api = cluster.api
    upload(s3, "hot", 1)
    create_s3_repository(api, s3, {"mode": "shared", "accessModes": ["ReadWriteMany"]})
    eventually(lambda: ready_repository(api), what="repository Ready")
    placement = {"copies": 1, "maxCopies": 2, "targetRequestsPerSecond": 2, "scaleDownDelaySeconds": DELAY}
    api.create(
        f"{GROUP_PATH}/inferenceservices",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "vision", "namespace": NS},
            "spec": {
                "repository": {"name": "models"},
                "replicas": 2,
                "models": [{"name": "hot", "placement": placement}],
            },
        },
    )
    eventually(lambda: len([p for p in cluster.pods.get("vision", []) if p.ready]) == 2, what="2 pods")
    eventually(
        lambda: conditions(api, "inferenceservices", "vision").get("Ready") == "True", what="service Ready"
    )
    # idle: one copy, and status says so (the rate measured, and nothing asked of it)
    # pods turn Ready one by one, so the copy may move once to a pod that outranks its first home: the
    # same pod alone, twice a few passes apart, is where it settled
    idle = eventually(lambda: _idle(api, cluster), what="hot on one pod for good, its rate measured")
    assert idle["requestsPerSecond"] == 0, idle
    (holder,) = _holders(cluster)
    url = next(p.url for p in cluster.pods["vision"] if p.name == holder)

    with Prober(url, "hot") as load:  # about 50 requests a second at most: far above one copy's target
        busy = eventually(lambda: _settled(api, cluster, 2), what="a second copy, in status too")
        assert busy["requestsPerSecond"] > 0 and busy["copiesNeededAt"], busy
    assert load.served and not load.errors, (len(load.served), load.errors[:3])

    # the load stopped: the operator measures no requests but keeps both copies for the delay (without
    # it the pass that measured 0 would have dropped the second copy at once), then lets one go
    held = eventually(
        lambda: (m := _settled(api, cluster, 2)) is not None and m["requestsPerSecond"] == 0 and m,
        what="rate 0 with both copies still held",
    )
    assert held["copiesNeededAt"], held
    done = eventually(lambda: _settled(api, cluster, 1), what="one copy again, in status too")
    assert _holders(cluster) == [holder], done  # the first-ranked pod keeps its copy: the ranking is stable
    assert "copiesNeededAt" not in done, done
    assert infer_version(url, "hot") == "1"
