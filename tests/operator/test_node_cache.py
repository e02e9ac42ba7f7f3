"""``storage.mode: nodeCache`` end to end on two nodes: one content-addressed copy per node.

The operator creates a ``local`` PersistentVolume and its claim; each server pod's init step syncs the
service's snapshot from S3 (SeaweedFS) into its node's copy (the simulated kubelet maps the volume to a
folder per node). The checks read what each pod reported copying, its own answers, the files on each
node, and the pod spec a ``restricted`` namespace would admit, not what the operator planned.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

from naiad_operator.api.modelrepository import ModelRepositorySpec, StorageMode
from naiad_operator.reconcile.repository_mount import TERMINATION_LOG, RepositoryMount

from tests.operator.cluster import BIN, NS, FakeCluster, ServerPod
from tests.operator.harness import (
    GROUP_PATH,
    conditions,
    create_s3_repository,
    eventually,
    index,
    infer_version,
    model_status,
    ready_repository,
    status_of,
    trigger_sync,
    upload,
)
from tests.support.models import IDENTITY_PY, identity_config, write_model

CLUSTER: dict[str, Any] = {"nodes": {"node-a": {}, "node-b": {}}}
ROOT = "/var/lib/naiad/node-cache"  # the operator's default NAIAD_OPERATOR_NODE_CACHE_PATH
#: Pod Security Standards, ``restricted``: the volume types it allows.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"
}  # fmt: skip


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What the ``restricted`` Pod Security level (v1.30) refuses in a pod spec; empty if admitted."""
    found: list[str] = []
    context = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            found.append(key)
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"volume {volume['name']}: {sorted(kinds)}")
    for c in [*(pod.get("initContainers") or []), *pod["containers"]]:
        sc = c.get("securityContext") or {}
        if sc.get("privileged") or sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{c['name']}: privilege escalation")
        if (sc.get("capabilities") or {}).get("drop") != ["ALL"] or set(
            (sc.get("capabilities") or {}).get("add") or []
        ) - {"NET_BIND_SERVICE"}:
            found.append(f"{c['name']}: capabilities")
        if not (sc.get("runAsNonRoot") or context.get("runAsNonRoot")) or sc.get("runAsUser") == 0:
            found.append(f"{c['name']}: may run as root")
        seccomp = (sc.get("seccompProfile") or context.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{c['name']}: seccomp")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            found.append(f"{c['name']}: hostPort")
    return found


def _pulls(cluster: FakeCluster, pod: ServerPod) -> tuple[str, int]:
    """The snapshot the pod's init step pulled and the bytes it copied into its node's copy."""
    message = cluster.init_messages.get(pod.name, [""])[-1]
    found = re.match(r"Pulled (\S+): (\d+) bytes copied", message)
    assert found, cluster.init_messages
    return found.group(1), int(found.group(2))


def _serving(cluster: FakeCluster) -> list[ServerPod]:
    return [p for p in cluster.pods.get("vision", []) if p.ready]


def _first_per_node(cluster: FakeCluster, pods: list[ServerPod]) -> dict[str, list[int]]:
    """Bytes copied by each pod, per node, in the order the pods started."""
    copied: dict[str, list[int]] = {}
    for pod in sorted(pods, key=lambda p: int(p.name.rsplit("-", 1)[1])):
        assert pod.node is not None
        copied.setdefault(pod.node, []).append(_pulls(cluster, pod)[1])
    return copied


def test_node_cache_storage(s3: Any, cluster: FakeCluster, operator: Any) -> None:
    api = cluster.api
    upload(s3, "alpha", 1)
    create_s3_repository(api, s3, storage={"mode": "nodeCache", "size": "1Gi"})

    # -- the node-local volume and its claim; a pod spec a `restricted` namespace admits ---------------
    pv = eventually(lambda: api.get("/api/v1/persistentvolumes/naiad-default-models-node-cache"), what="PV")
    assert pv["spec"]["local"] == {"path": f"{ROOT}/{NS}/models"}
    assert pv["spec"]["claimRef"] == {"namespace": NS, "name": "models-node-cache"}
    # the claim comes a moment after the volume: both are applied by one pass, one after the other
    claim = eventually(lambda: api.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/models-node-cache"))
    assert claim["spec"]["volumeName"] == pv["metadata"]["name"]
    repo = eventually(lambda: ready_repository(api), what="repository Ready")
    first = repo["snapshot"]["current"]
    # created once there is a snapshot, so the first two pods start on it (one per node)
    api.create(
        f"{GROUP_PATH}/inferenceservices",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "vision", "namespace": NS},
            "spec": {"repository": {"name": "models"}, "models": [{"name": "alpha"}], "replicas": 2},
        },
    )
    eventually(
        lambda: conditions(api, "inferenceservices", "vision").get("Ready") == "True", what="service Ready"
    )
    template = api.get(f"/apis/apps/v1/namespaces/{NS}/deployments/vision")["spec"]["template"]["spec"]
    assert restricted_violations(template) == []
    assert {v["name"]: v.get("persistentVolumeClaim") for v in template["volumes"]}["repository"] == {
        "claimName": "models-node-cache"
    }
    (server,) = [c for c in template["containers"] if c["name"] == "server"]
    assert {m["mountPath"]: m.get("readOnly") for m in server["volumeMounts"]}["/repository"] is True

    # -- one pod per node: each copied the snapshot into its own node's copy and serves it ------------
    # Ready may come from the first pod alone; both pods are waited for (on a loaded machine the second
    # one's init step can still be copying)
    eventually(lambda: len(_serving(cluster)) == 2, what="2 pods serving")
    pods = _serving(cluster)
    assert sorted(p.node or "" for p in pods) == ["node-a", "node-b"]
    for pod in pods:
        assert pod.node is not None
        snapshot, copied = _pulls(cluster, pod)
        assert snapshot == first and copied > 0
        assert index(pod.url) == {"alpha": {"1": "READY"}}
        assert infer_version(pod.url, "alpha") == "1"
        copy = cluster.node_dir(pod.node, f"{ROOT}/{NS}/models")
        assert (copy / "snapshots" / first.removeprefix("sha256:") / "alpha" / "1" / "model.py").exists()

    # -- a second pod on each node finds the files there and copies nothing -------------------------------
    api.patch(f"{GROUP_PATH}/inferenceservices/vision", {"spec": {"replicas": 3}})
    eventually(lambda: len(_serving(cluster)) == 3, what="3 pods serving")
    per_node = _first_per_node(cluster, _serving(cluster))
    assert {node: len(c) for node, c in per_node.items()} == {"node-a": 2, "node-b": 1}, per_node
    assert per_node["node-a"][0] == per_node["node-b"][0] > 0 and per_node["node-a"][1] == 0, per_node
    for pod in _serving(cluster):
        assert infer_version(pod.url, "alpha") == "1"

    # -- a new snapshot: the first new pod on each node copies only the changed file, the others none ---
    old = {p.name for p in _serving(cluster)}
    changed = IDENTITY_PY + "\n# version 2\n"
    upload(s3, "alpha", 2, changed)  # config.pbtxt is written again, unchanged
    trigger_sync(api, "v2")
    second = eventually(
        lambda: (s := status_of(api, "modelrepositories", "models")["snapshot"]["current"]) != first and s,
        what="new snapshot",
    )
    eventually(lambda: model_status(api, "alpha").get("activeVersions") == [2], what="alpha v2", timeout=120)
    eventually(lambda: not ({p.name for p in cluster.pods["vision"]} & old), what="old pods gone", timeout=90)
    eventually(lambda: len(_serving(cluster)) == 3, what="3 new pods serving")
    new = _serving(cluster)
    assert all(_pulls(cluster, p)[0] == second for p in new)
    per_node = _first_per_node(cluster, new)
    assert sorted(per_node) == ["node-a", "node-b"]
    for pulls in per_node.values():
        assert pulls[0] == len(changed.encode()) and not any(pulls[1:]), per_node
    for pod in new:
        assert index(pod.url)["alpha"]["2"] == "READY"
        assert infer_version(pod.url, "alpha") == "2"
    for node in ("node-a", "node-b"):  # both snapshots on the node share the unchanged blobs
        copy = cluster.node_dir(node, f"{ROOT}/{NS}/models")
        one, two = (copy / "snapshots" / s.removeprefix("sha256:") / "alpha" for s in (first, second))
        assert (one / "config.pbtxt").stat().st_ino == (two / "config.pbtxt").stat().st_ino


def test_restricted_check_refuses_what_baseline_refuses() -> None:
    """The check above can fail: a hostPath volume (the obvious way to reach a node's disk), a root
    container or a missing seccomp profile are each named."""
    hardened: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    container: dict[str, Any] = {"name": "server", "securityContext": hardened}
    pod: dict[str, Any] = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [{"name": "cache", "hostPath": {"path": "/var/lib/naiad"}}],
    }
    assert restricted_violations(pod) == ["volume cache: ['hostPath']"]
    pod["volumes"] = []
    assert restricted_violations(pod) == []
    container["securityContext"] = {**hardened, "runAsUser": 0}
    pod["securityContext"] = {"runAsNonRoot": True}
    assert restricted_violations(pod) == ["server: may run as root", "server: seccomp"]


def test_pods_starting_together_on_a_node_take_turns(tmp_path: Path) -> None:
    """Two init steps at once on one node's copy: the sync's lock turns one away (exit status 7), it
    tries again and then finds every file there. Both succeed; the bytes are copied once."""
    source = tmp_path / "source"
    model = write_model(source, "alpha", identity_config("alpha", "TYPE_FP32"), IDENTITY_PY)
    (model / "1" / "weights.bin").write_bytes(b"\0" * (256 << 20))  # long enough for the syncs to overlap
    spec = ModelRepositorySpec.model_validate({"source": {"uri": "source"}, "storage": {"mode": "nodeCache"}})
    mount = RepositoryMount("models-node-cache", StorageMode.NODE_CACHE, spec, None)
    (init,), _ = mount.init_containers("naiad/server:test", "IfNotPresent")
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", **{e["name"]: e["value"] for e in init["env"]}}
    cache = tmp_path / "node-a"
    cache.mkdir()

    def start(n: int) -> subprocess.Popen[str]:
        log = str(tmp_path / f"termination{n}")
        paths = {"/repository": str(cache), "/tmp": str(tmp_path / f"tmp{n}"), TERMINATION_LOG: log}
        (tmp_path / f"tmp{n}").mkdir()
        command = [re.sub("|".join(map(re.escape, paths)), lambda m: paths[m.group(0)], a) for a in init["command"]]
        # relative to tmp_path: the source folder's own path must not contain the mapped /tmp
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True, cwd=tmp_path)

    pods = [start(n) for n in range(2)]
    outputs = [p.communicate(timeout=60)[0] for p in pods]
    assert [p.returncode for p in pods] == [0, 0], outputs
    copied = sorted(int(re.findall(r"(\d+) bytes copied", out)[-1]) for out in outputs)
    assert copied[0] == 0 and copied[1] > 256 << 20, outputs
