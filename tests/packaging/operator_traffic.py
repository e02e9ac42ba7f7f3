"""What the operator asks of the Kubernetes API, recorded: the ground truth for the chart's RBAC rules.

The real ``naiad-operator`` (a subprocess, started as the chart's Deployment starts it) runs against KMock
(``tests/support/kmock_k8s.py``) through one lifecycle that reaches every code path that calls the API: a
ModelRepository whose claim is created and whose sync Job is created, finished (the test plays the Job
controller) and read back with its pod; a nodeCache repository's node-local PersistentVolume; an InferenceService with every optional child (HPA, PDB), then
with them switched off (so they are deleted); a server pod whose readiness gate the operator closes; the
repository deleted (its claim, owned under
``retentionPolicy: Delete``, is garbage collection's to delete). Every request signed with the operator's token is kept.

Requests become RBAC triples (API group, resource[/subresource], verb) the way the API server authorizes
them: a GET of a collection is ``list`` (``watch`` with ``?watch=true``), of an object ``get``; POST is
``create``; PATCH ``patch``, and a server-side apply also needs ``create``, since it creates an object that
does not exist yet; DELETE ``delete``. A write that sets an ownerReference with ``blockOwnerDeletion``
also needs ``update`` on the owner's ``finalizers`` subresource: that is what the
OwnerReferencesPermissionEnforcement admission plugin (on by default in OpenShift) checks. Discovery (``/api``, ``/apis``, ``/version``) is open to every
authenticated user and is left out.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import attrs
import pytest
from kmock._internal import rendering

from tests.operator.cluster import Api
from tests.support import kmock_k8s
from tests.support.server import free_port

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
NS = "default"
GROUP_PATH = f"/apis/serving.naiad.dev/v1alpha1/namespaces/{NS}"
TOKEN = "Bearer test"  # what ApiServer.kubeconfig() gives the operator; the test's own client sends none
APPLY_PATCH = "application/apply-patch+yaml"
DISCOVERY = ("/api", "/apis", "/version", "/openapi")

#: (API group, resource or resource/subresource, verb); "" is the core group.
Rule = tuple[str, str, str]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    watch: bool
    content_type: str
    blocking_owners: tuple[str, ...] = ()
    """``apiVersion/kind`` of each ownerReference the written object sets with blockOwnerDeletion."""


#: The operator's owner kinds -> their plural (for the ``<plural>/finalizers`` subresource).
OWNER_PLURALS = {"ModelRepository": "modelrepositories", "InferenceService": "inferenceservices"}


def _blocking_owners(data: Any) -> tuple[str, ...]:
    if not isinstance(data, dict) or request_is_status(data):
        return ()
    owners = (data.get("metadata") or {}).get("ownerReferences") or []
    return tuple(f"{o['apiVersion']}/{o['kind']}" for o in owners if o.get("blockOwnerDeletion"))


def request_is_status(data: dict[str, Any]) -> bool:
    return set(data) == {"status"}


@dataclass(frozen=True)
class Traffic:
    """RBAC triples by the scope the request needed: under /namespaces/NS/ (a Role in NS suffices) or
    not (a ClusterRole: cluster-scoped kinds, and any kind listed or watched across all namespaces)."""

    namespaced: set[Rule] = field(default_factory=set)
    cluster: set[Rule] = field(default_factory=set)
    liveness_ok: bool = False

    @property
    def all(self) -> set[Rule]:
        return self.namespaced | self.cluster


@attrs.define(kw_only=True)
class RecordingEmulator(kmock_k8s.K8sEmulator):
    """The shimmed emulator, keeping every request the operator signed."""

    requests: list[Request] = attrs.field(factory=list, init=False)

    async def _handle(self, request: rendering.Request) -> Any:
        headers = {k.lower(): v for k, v in request.headers.items()}
        if headers.get("authorization") == TOKEN:
            self.requests.append(
                Request(
                    str(request.method.value).upper(),
                    request.url.path,
                    request.params.get("watch") in ("true", "1"),
                    (headers.get("content-type") or "").split(";")[0].strip(),
                    _blocking_owners(request.data)
                    if request.method.value.upper() in ("POST", "PATCH")
                    else (),
                )
            )
        return await super()._handle(request)


def rules_of(requests: list[Request]) -> Traffic:
    """RBAC triples for the requests (see the module docstring)."""
    traffic = Traffic()
    for r in requests:
        parts = r.path.strip("/").split("/")
        if parts[0] == "api":  # /api/v1/...: the core group
            group, rest = "", parts[2:]
        elif parts[0] == "apis" and len(parts) > 3:  # /apis/GROUP/VERSION/...
            group, rest = parts[1], parts[3:]
        elif r.path.startswith(DISCOVERY):
            continue
        else:
            raise AssertionError(f"unexpected API path {r.method} {r.path}")
        if not rest:  # /api/v1 or /apis/GROUP/VERSION: discovery
            continue
        namespaced = rest[0] == "namespaces" and len(rest) >= 3  # namespaces/NS/PLURAL[/NAME[/SUB]]
        if namespaced:
            rest = rest[2:]
        resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
        named = len(rest) > 1
        if r.method == "GET":
            verbs = ["get"] if named else ["watch" if r.watch else "list"]
        elif r.method == "POST":
            verbs = ["create"]
        elif r.method == "PATCH":
            verbs = ["patch", "create"] if r.content_type == APPLY_PATCH else ["patch"]
        elif r.method == "DELETE":
            verbs = ["delete"]
        else:
            raise AssertionError(f"unexpected method {r.method} {r.path}")
        rules = traffic.namespaced if namespaced else traffic.cluster
        rules.update((group, resource, verb) for verb in verbs)
        for owner in r.blocking_owners:
            owner_group, kind = owner.split("/")[0], owner.rsplit("/", 1)[1]
            rules.add((owner_group, f"{OWNER_PLURALS[kind]}/finalizers", "update"))
    return traffic


def eventually(check: Callable[[], T], what: str, timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def api_server() -> Iterator[kmock_k8s.ApiServer]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kmock_k8s, "K8sEmulator", RecordingEmulator)  # ApiServer builds its emulator by this name
        server = kmock_k8s.ApiServer(sorted((ROOT / "crds").glob("*.yaml"))).start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def operator(server: kmock_k8s.ApiServer, namespaces: list[str], workdir: Path) -> Iterator[int]:
    """``python -m naiad_operator`` with short intervals; yields its liveness port."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NAIAD_OPERATOR_", "KUBERNETES_"))}
    env.update(
        KUBECONFIG=str(server.kubeconfig(workdir / "kubeconfig")),
        NAIAD_OPERATOR_NAMESPACES=json.dumps(namespaces),
        NAIAD_OPERATOR_RECONCILE_INTERVAL="0.5",
        NAIAD_OPERATOR_SYNC_POLL_INTERVAL="0.3",
        NAIAD_OPERATOR_SERVER_IMAGE="naiad/server:test",
        NAIAD_OPERATOR_METRICS_PORT=str(free_port()),
    )
    log = workdir / "operator.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "naiad_operator", f"--liveness=http://127.0.0.1:{port}/healthz"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield port
    except BaseException as exc:
        exc.add_note(f"operator log (tail):\n{log.read_text(errors='replace')[-6000:]}")
        raise
    finally:
        process.send_signal(signal.SIGINT)  # kopf stops gracefully on SIGINT/SIGTERM
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _finish_job(api: Api, name: str) -> None:
    """Play the Job controller and the kubelet: a pod that terminated with a sync summary, a Complete Job."""
    summary = {
        "result": "Succeeded",
        "snapshot": "sha256:0123456789abcdef",
        "objectsListed": 2,
        "objectsCopied": 2,
        "objectsReused": 0,
        "bytesCopied": 10,
        "durationSeconds": 0.1,
        "models": {"alpha": {"1": "sha256:00112233445566aa"}},
    }
    pod = f"{name}-pod"
    api.create(
        f"/api/v1/namespaces/{NS}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "namespace": NS, "labels": {"job-name": name}},
            "spec": {"containers": [{"name": "sync", "image": "naiad/server:test"}]},
        },
    )
    terminated = {"exitCode": 0, "message": json.dumps(summary), "finishedAt": "2026-01-01T00:00:00Z"}
    api.patch(
        f"/api/v1/namespaces/{NS}/pods/{pod}/status",
        {
            "status": {
                "phase": "Succeeded",
                "containerStatuses": [{"name": "sync", "state": {"terminated": terminated}}],
            }
        },
    )
    api.patch(
        f"/apis/batch/v1/namespaces/{NS}/jobs/{name}/status",
        {"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}},
    )


def _phase(api: Api, plural: str, name: str) -> str | None:
    return ((api.get(f"{GROUP_PATH}/{plural}/{name}") or {}).get("status") or {}).get("phase")


def record(namespaces: list[str], workdir: Path) -> Traffic:
    """Run the lifecycle with the operator watching ``namespaces`` (empty: the cluster); what it asked."""
    with api_server() as server, operator(server, namespaces, workdir) as port:
        api = Api(server.url)
        eventually(lambda: healthy(port), "the operator's liveness endpoint")
        api.create(
            f"{GROUP_PATH}/modelrepositories",
            {
                "apiVersion": "serving.naiad.dev/v1alpha1",
                "kind": "ModelRepository",
                "metadata": {"name": "models", "namespace": NS},
                "spec": {"source": {"uri": "s3://bucket/triton"}, "retentionPolicy": "Delete"},
            },
        )
        eventually(lambda: api.get(f"/apis/batch/v1/namespaces/{NS}/jobs/models-sync-1"), "the sync Job")
        # a spec change while it runs: the Job (its pod template cannot change) is replaced
        api.patch(f"{GROUP_PATH}/modelrepositories/models", {"spec": {"sync": {"keepSnapshots": 4}}})
        eventually(lambda: api.get(f"/apis/batch/v1/namespaces/{NS}/jobs/models-sync-2"), "the new sync Job")
        _finish_job(api, "models-sync-2")
        eventually(lambda: _phase(api, "modelrepositories", "models") == "Ready", "the repository Ready")
        # storage.mode nodeCache: the operator creates a node-local PersistentVolume (cluster-scoped)
        api.create(
            f"{GROUP_PATH}/modelrepositories",
            {
                "apiVersion": "serving.naiad.dev/v1alpha1",
                "kind": "ModelRepository",
                "metadata": {"name": "cached", "namespace": NS},
                "spec": {"source": {"uri": "s3://bucket/triton"}, "storage": {"mode": "nodeCache"}},
            },
        )
        eventually(lambda: api.get("/api/v1/persistentvolumes/naiad-default-cached-node-cache"), "the volume")

        isvc = f"{GROUP_PATH}/inferenceservices/vision"
        api.create(
            f"{GROUP_PATH}/inferenceservices",
            {
                "apiVersion": "serving.naiad.dev/v1alpha1",
                "kind": "InferenceService",
                "metadata": {"name": "vision", "namespace": NS},
                "spec": {
                    "repository": {"name": "models"},
                    "models": [{"name": "alpha"}],
                    "autoscaling": {"maxReplicas": 3, "metric": "QueueTime"},
                    "disruption": {"minAvailable": 1},
                },
            },
        )
        # a server pod waiting for its volume: the operator reads the Events about it (FailedMount...)
        api.create(
            f"/api/v1/namespaces/{NS}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "vision-0", "labels": {"serving.naiad.dev/inferenceservice": "vision"}},
                "spec": {"containers": [{"name": "server", "image": "naiad/server:test"}]},
            },
        )
        api.patch(
            f"/api/v1/namespaces/{NS}/pods/vision-0/status",
            {
                "status": {
                    "phase": "Pending",
                    "conditions": [{"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [
                        {"name": "server", "state": {"waiting": {"reason": "ContainerCreating"}}}
                    ],
                }
            },
        )
        # a server container that stopped being ready while its readiness gate was open (a restart): the
        # operator closes the gate at once (reads the pod fresh, patches its status)
        gate = "serving.naiad.dev/models-loaded"
        api.create(
            f"/api/v1/namespaces/{NS}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "vision-1", "labels": {"serving.naiad.dev/inferenceservice": "vision"}},
                "spec": {
                    "containers": [{"name": "server", "image": "naiad/server:test"}],
                    "readinessGates": [{"conditionType": gate}],
                },
            },
        )
        api.patch(
            f"/api/v1/namespaces/{NS}/pods/vision-1/status",
            {
                "status": {
                    "phase": "Running",
                    "conditions": [
                        {"type": "ContainersReady", "status": "False"},
                        {"type": "Ready", "status": "False"},
                        {
                            "type": gate,
                            "status": "True",
                            "message": "serves the fleet's models (container start 0)",
                        },
                    ],
                }
            },
        )

        def gate_closed() -> bool:
            pod = api.get(f"/api/v1/namespaces/{NS}/pods/vision-1") or {}
            return any(c["type"] == gate and c["status"] == "False" for c in pod["status"]["conditions"])

        eventually(gate_closed, "the readiness gate closed")
        hpa = f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers/vision"
        pdb = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/vision"
        eventually(lambda: api.get(hpa) and api.get(pdb), "the HPA and the PDB")
        eventually(lambda: _phase(api, "inferenceservices", "vision"), "the service's status")
        # switched off: the operator deletes what it made (a merge patch with null removes the fields)
        api.patch(isvc, {"spec": {"autoscaling": None, "disruption": None}})
        eventually(lambda: api.get(hpa) is None and api.get(pdb) is None, "the HPA and PDB deleted")

        # retentionPolicy Delete: the repository owns its claim, so garbage collection (not the operator,
        # and no finalizer) deletes it with the repository; KMock has no garbage collector
        claim = api.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/models-repository")
        assert [o["kind"] for o in claim["metadata"]["ownerReferences"]] == ["ModelRepository"]
        api.request("DELETE", f"{GROUP_PATH}/modelrepositories/models")
        eventually(
            lambda: api.get(f"{GROUP_PATH}/modelrepositories/models") is None, "the repository deleted"
        )
        assert isinstance(server.emulator, RecordingEmulator)
        return replace(rules_of(server.emulator.requests), liveness_ok=healthy(port))
