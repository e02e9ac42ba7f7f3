"""Which pods hold which models (``models[].placement``), and the peers file that tells every pod.

``all`` (the default) puts a model on every pod.  ``{copies: k}`` puts it on k pods chosen by rendezvous
hashing of (model, pod name) over the pods the operator may act on: each model ranks the pods by a
hash of the pair and takes the first k, so the choice needs no memory between passes, differs between
models (the copies spread over the fleet), and moves as little as possible when pods come and go: a
new pod takes a copy only from the pod it outranks, a removed pod's copy goes to the next in rank.
With ``maxCopies`` the number follows the model's request rate (:mod:`.demand`): extra copies are the next
pods in the same ranking.
``onDemand`` puts it on no pod ahead: every server starts with ``--load-on-demand`` for it and loads it
when a request names it.

A pod that does not hold a model forwards its requests to one that does, over HTTP and gRPC; the pods
learn which ones do from the peers file (``{"models": {"<model>": ["host:httpport:grpcport", ...]}}``),
a ConfigMap mounted into every pod and rewritten from what the pods' indexes say they hold.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from naiad_operator.api.inferenceservice import Holder, ModelSpec
from naiad_operator.api.observed import PodObservation
from naiad_operator.reconcile import names

PEERS_KEY = "peers.json"
PEERS_MOUNT = "/etc/naiad/peers"
PEERS_FILE = f"{PEERS_MOUNT}/{PEERS_KEY}"
PEERS_VOLUME = "peers"


def chosen(spec: ModelSpec, pods: Iterable[str], copies: int | None = None) -> frozenset[str] | None:
    """The pods (of ``pods``, by name) that should hold ``spec``'s model loaded; None: every pod.

    ``copies``: how many a ``{copies, maxCopies}`` model holds this pass (:mod:`.demand`); else the
    spec's k. More copies take the next pods in the same ranking, so growing moves no copy."""
    candidates = list(pods)
    if spec.on_demand:
        return frozenset()
    if spec.copies is None:
        return None
    copies = copies if copies is not None else spec.copies
    ranked = sorted(candidates, key=lambda pod: _rank(spec.name, pod), reverse=True)
    return frozenset(ranked[:copies])


def _rank(model: str, pod: str) -> bytes:
    return hashlib.sha256(f"{model}\0{pod}".encode()).digest()


def holders(model: str, pods: Sequence[PodObservation]) -> list[Holder]:
    """The pods whose index has some version of ``model`` READY, by name (all of them: the peers file
    needs every address; status shows the first ``replicaDetailLimit``)."""
    return [
        Holder(pod=p.name, address=p.peer, memory_bytes=p.held_bytes.get(model))
        for p in sorted(pods, key=lambda p: p.name)
        if p.reporting and p.ready_versions(model)
    ]


def peers_document(models: Sequence[ModelSpec], pods: Sequence[PodObservation]) -> dict[str, Any]:
    """The peers file: each model placed on some pods only -> the addresses of the pods that hold it.
    Models on every pod are left out (every Ready pod serves them), which keeps the file small."""
    table: dict[str, list[str]] = {}
    for spec in sorted(models, key=lambda m: m.name):
        if spec.copies is None and not spec.on_demand:
            continue
        addresses = [h.address for h in holders(spec.name, pods) if h.address]
        if addresses:
            table[spec.name] = addresses
    return {"models": table}


def desired_peers_configmap(
    name: str,
    namespace: str,
    owner: dict[str, Any],
    models: Sequence[ModelSpec],
    pods: Sequence[PodObservation],
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": names.child_metadata(
            names.dns_name(name, "peers"), namespace, names.server_labels(name), owner
        ),
        "data": {PEERS_KEY: json.dumps(peers_document(models, pods), sort_keys=True)},
    }


def placed(models: Sequence[ModelSpec]) -> bool:
    """Whether some model is on some pods only: only then do pods get the peers file (a service whose
    models are all on every pod keeps the pod template it always had, so upgrading the operator does
    not restart its pods)."""
    return any(m.copies is not None or m.on_demand for m in models)


def server_args(models: Sequence[ModelSpec]) -> list[str]:
    """The server flags placement adds: the peers file, and ``--load-on-demand`` per onDemand model."""
    if not placed(models):
        return []
    return [f"--peers-file={PEERS_FILE}", *(f"--load-on-demand={m.name}" for m in models if m.on_demand)]


def peers_volume(isvc: str) -> dict[str, Any]:
    """The pods' view of the peers ConfigMap; optional, since the first pass writes it after the pods'
    first indexes are read (until then a server has no peers and serves what it holds)."""
    return {
        "name": PEERS_VOLUME,
        "configMap": {"name": names.dns_name(isvc, "peers"), "optional": True},
    }
