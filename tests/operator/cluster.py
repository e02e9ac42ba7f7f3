"""The parts of a cluster KMock lacks, played by the test: a Job controller and a Deployment controller
with a kubelet that runs containers as local processes.

The containers run what the operator rendered, not a stand-in: a sync Job's pod runs its ``/bin/sh -c``
script (``naiad repo sync`` against the S3 server, then the summary compaction) and a Deployment's pods
run ``naiad serve`` with the rendered flags, the ConfigMap's ``--load-model`` list and the Secret's
credentials. Paths the pod would see (``/repository``, ``/tmp``, ``/dev/termination-log``) map to
per-claim and per-pod temporary folders; each server pod gets its own free ports (appended flags win),
and its Pod object names them (``podIP`` 127.0.0.1, the ``http`` container port), which is how the
operator finds it without any test hook. Readiness follows the kubelet's rule: ``ContainersReady`` from
the server's readiness probe, and ``Ready`` only when, in addition, every condition the pod's
``readinessGates`` name is True (conditions someone else wrote are kept).

Pods reach the API server as in a cluster: ``KUBERNETES_SERVICE_HOST``/``_PORT`` name an HTTPS front
(:class:`ApiFront`) whose CA, with a token naming the pod's ServiceAccount, is mounted where the kubelet
mounts them; the front authorizes each request by the namespace's Roles and RoleBindings, as the API
server's RBAC does, before passing it to KMock (which has no RBAC). Jobs run concurrently, and a Job
deleted while it runs has its process killed, as the garbage collector and the kubelet would.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.server import free_port

NS = "default"
BIN = str(Path(sys.executable).parent)


class Api:
    """A plain JSON client for the test's side of the API server (no operator code involved)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/merge-patch+json"
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        req.add_header("Content-Type", "application/json" if method == "POST" else content_type)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def items(self, path: str) -> list[dict[str, Any]]:
        return list((self.get(path) or {}).get("items") or [])

    def create(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("POST", path, body)

    def patch(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("PATCH", path, body)


ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
VERBS = {"GET": "get", "PATCH": "patch", "PUT": "update", "DELETE": "delete", "POST": "create"}


class ApiFront:
    """HTTPS in front of KMock for pods, with RBAC: a pod's token ``system:serviceaccount:NS:NAME``
    may do what a Role bound to that account in NS allows (``resourceNames`` included), nothing else.
    ``requests`` records (method, path, account, allowed) for the test to read."""

    def __init__(self, api: Api, root: Path) -> None:
        self.api = api
        root.mkdir(parents=True, exist_ok=True)
        self.cert, key = root / "ca.crt", root / "ca.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(key), "-out", str(self.cert), "-days", "2", "-subj", "/CN=kubernetes",
             "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True, capture_output=True,
        )  # fmt: skip
        self.requests: list[tuple[str, str, str, bool]] = []
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                account = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                allowed = front.allowed(self.command, self.path, account)
                front.requests.append((self.command, self.path, account, allowed))
                if not allowed:
                    self._answer(403, b'{"kind":"Status","reason":"Forbidden"}')
                    return
                host, _, port = api.url.removeprefix("http://").partition(":")
                upstream = http.client.HTTPConnection(host, int(port), timeout=30)
                headers = {"Content-Type": self.headers.get("Content-Type") or "application/json"}
                try:  # closed also when the pod went away before its answer (the write then fails)
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    answer = upstream.getresponse()
                    self._answer(answer.status, answer.read())
                finally:
                    upstream.close()

            def _answer(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = do_PUT = do_POST = do_DELETE = _forward

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True, name="api-front").start()

    def allowed(self, method: str, path: str, token: str) -> bool:
        match = re.fullmatch(r"system:serviceaccount:([^:]+):(.+)", token)
        found = re.fullmatch(r"/api/v1/namespaces/([^/]+)/([^/]+)/([^/?]+)", path.split("?")[0])
        if match is None or found is None or match.group(1) != found.group(1):
            return False
        namespace, account = match.groups()
        _, resource, name = found.groups()
        verb = VERBS.get(method, "")
        for binding in self.api.items(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings"
        ):
            subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
            if subject not in binding.get("subjects") or []:
                continue
            role = self.api.get(
                f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles/{binding['roleRef']['name']}"
            )
            for rule in (role or {}).get("rules") or []:
                if (
                    "" in rule.get("apiGroups", [])
                    and resource in rule.get("resources", [])
                    and verb in rule.get("verbs", [])
                    and name in (rule.get("resourceNames") or [name])
                ):
                    return True
        return False

    def mount(self, pod_spec: dict[str, Any], folder: Path) -> Path | None:
        """The ServiceAccount volume the kubelet mounts (unless the pod opts out)."""
        if pod_spec.get("automountServiceAccountToken") is False:
            return None
        folder.mkdir(parents=True, exist_ok=True)
        account = pod_spec.get("serviceAccountName") or "default"
        (folder / "token").write_text(f"system:serviceaccount:{NS}:{account}")
        (folder / "namespace").write_text(NS)
        (folder / "ca.crt").write_bytes(self.cert.read_bytes())
        return folder

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class ServerPod:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    template: str = ""
    grpc_port: int = 0
    node: str | None = None
    gpus: int = 0
    pending: bool = False
    """Not running: unschedulable, its image cannot be pulled, or its volume cannot be attached."""
    claims: set[str] = field(default_factory=set)
    crash_reported: bool = False
    ready: bool = False
    container_ready: bool = False
    metrics_port: int = 0
    restarts: int = 0
    started: float = field(default_factory=time.monotonic)
    attempted: float = field(default_factory=time.monotonic)
    ready_at: float | None = None
    gate_changed: float | None = None
    """When the kubelet first saw a closed readiness gate while the pod was Ready (for ``kubelet_lag``)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class FakeCluster:
    """Runs Jobs and Deployments in a background thread until :meth:`stop`."""

    api: Api
    env: dict[str, str]
    claims: dict[str, Path] = field(default_factory=dict)
    pods: dict[str, list[ServerPod]] = field(default_factory=dict)
    jobs_run: list[str] = field(default_factory=list)
    surges: dict[str, ServerPod] = field(default_factory=dict)
    pod_counts: dict[str, int] = field(default_factory=dict)
    removed: list[ServerPod] = field(default_factory=list)
    init_messages: dict[str, list[str]] = field(default_factory=dict)
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each pod's spec as the kubelet runs it (preStop hook, grace period), by pod name."""
    terminating: list[threading.Thread] = field(default_factory=list)
    job_processes: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    """The container process of each Job's pod, by Job name (a test may kill one mid-way)."""
    jobs_done: dict[str, int] = field(default_factory=dict)
    """Exit status of each Job's container that ran to its end, by Job name (-15: killed because its
    Job was deleted while it ran)."""
    hold_jobs: threading.Event = field(default_factory=threading.Event)
    """While set, new Jobs wait before their pod starts (as on a cluster with no room for them)."""
    front: ApiFront | None = None
    nodes: dict[str, dict[str, str]] = field(default_factory=lambda: {"node-0": {}})
    """Node name -> labels; pods of a Deployment spread over the nodes that fit them."""
    gpus_per_node: int = 8
    missing_images: set[str] = field(default_factory=set)
    posted: set[tuple[str, str]] = field(default_factory=set)
    """Images no registry has: pods naming one wait in ImagePullBackOff."""
    _root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="naiad-cluster-")))
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    errors: list[str] = field(default_factory=list)
    projected: dict[Path, str] = field(default_factory=dict)
    """Folders that show a ConfigMap volume (host folder -> ConfigMap name), kept up to date."""
    kubelet_lag: float = 0.0
    """Seconds before a closed readiness gate shows in the pod's Ready condition (a busy node's kubelet
    syncs pod status late; the Service's endpoints follow Ready, not the gate). An opened gate shows at
    once: the operator waits for Ready before it goes on either way, so a lag there only costs time."""

    def start(self) -> FakeCluster:
        self.front = ApiFront(self.api, self._root / "api-front")
        self._thread = threading.Thread(target=self._loop, daemon=True, name="fake-cluster")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for pod in [*(p for pods in self.pods.values() for p in pods), *self.surges.values()]:
            _kill(pod.process)
        for thread in self.terminating:
            thread.join(60)
        for process in self.job_processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        if self.front is not None:
            self.front.stop()
        shutil.rmtree(self._root, ignore_errors=True)  # the pods' and Jobs' copies, the claims

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._run_jobs()
                self._run_deployments()
                self._project_config_maps()
            except Exception as exc:  # keep playing kubelet; the test reads the errors
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(0.2)

    # ---- volumes and environment ---------------------------------------------------------------

    def pod_dir(self, pod: str) -> Path:
        """The pod's scratch folder: its emptyDir volumes are subfolders named after them."""
        return self._root / "pods" / pod

    def claim_dir(self, claim: str) -> Path:
        if claim not in self.claims:
            self.claims[claim] = self._root / "claims" / claim
            self.claims[claim].mkdir(parents=True)
        return self.claims[claim]

    def local_volume(self, claim: str) -> str | None:
        """The ``local`` path of the PersistentVolume the claim names, if it names one."""
        pvc = self.api.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/{claim}") or {}
        name = (pvc.get("spec") or {}).get("volumeName")
        pv = self.api.get(f"/api/v1/persistentvolumes/{name}") if name else None
        return (((pv or {}).get("spec") or {}).get("local") or {}).get("path")

    def node_dir(self, node: str, path: str) -> Path:
        """A node's own disk: a ``local`` volume is this folder on whichever node the pod runs."""
        host = self._root / "nodes" / node / path.lstrip("/")
        host.mkdir(parents=True, exist_ok=True)  # the node bootstrap's part (operator/README.md)
        return host

    def _mounts(
        self, pod_spec: dict[str, Any], container: dict[str, Any], scratch: Path, node: str | None = None
    ) -> dict[str, str]:
        volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
        mounts: dict[str, str] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            local = self.local_volume(claim) if claim and node else None
            if local is not None and node is not None:
                host = self.node_dir(node, local)
            elif claim:
                host = self.claim_dir(claim)
            elif "configMap" in volume:  # the kubelet's projection, refreshed as the ConfigMap changes
                host = scratch / mount["name"]
                host.mkdir(parents=True, exist_ok=True)
                self.projected[host] = volume["configMap"]["name"]
                self._project(host, volume["configMap"]["name"])
            else:
                host = scratch / mount["name"]
                host.mkdir(parents=True, exist_ok=True)
            mounts[mount["mountPath"]] = str(host)
        return mounts

    def _project(self, host: Path, configmap: str) -> None:
        """Each key of the ConfigMap as a file, replaced whole (a new file renamed over the old) when
        its content changed, as the kubelet swaps a ConfigMap volume's contents."""
        cm = self.api.get(f"/api/v1/namespaces/{NS}/configmaps/{configmap}") or {}
        for key, value in (cm.get("data") or {}).items():
            target = host / key
            if target.exists() and target.read_text() == value:
                continue
            scratch = host / f".{key}.new"
            scratch.write_text(value)
            scratch.replace(target)

    def _project_config_maps(self) -> None:
        for host, configmap in list(self.projected.items()):
            if host.exists():
                self._project(host, configmap)

    def _environment(self, container: dict[str, Any]) -> dict[str, str]:
        env = {"PATH": f"{BIN}:{os.environ.get('PATH', '')}", "PYTHONUNBUFFERED": "1", **self.env}
        if os.environ.get("PYTHONPATH"):  # a checkout run against another checkout's venv runs its own code
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        for source in container.get("envFrom") or []:
            secret = self.api.get(f"/api/v1/namespaces/{NS}/secrets/{source['secretRef']['name']}")
            env.update((secret or {}).get("stringData") or {})
        for var in container.get("env") or []:
            if "value" in var:
                env[var["name"]] = var["value"]
            elif "configMapKeyRef" in (var.get("valueFrom") or {}):
                ref = var["valueFrom"]["configMapKeyRef"]
                cm = self.api.get(f"/api/v1/namespaces/{NS}/configmaps/{ref['name']}") or {}
                env[var["name"]] = (cm.get("data") or {}).get(ref["key"], "")
        return env

    @staticmethod
    def _mapped(text: str, mounts: dict[str, str]) -> str:
        """Paths as the container sees them -> host paths, in one pass (host paths may contain /tmp)."""
        pattern = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
        return re.sub(pattern, lambda match: mounts[match.group(0)], text)

    # ---- Jobs -----------------------------------------------------------------------------------

    def _run_jobs(self) -> None:
        jobs = self.api.items(f"/apis/batch/v1/namespaces/{NS}/jobs")
        present = {job["metadata"]["name"] for job in jobs}
        for name, process in list(self.job_processes.items()):
            if name not in present and process.poll() is None:  # deleted while it ran: its pod goes
                os.killpg(process.pid, signal.SIGTERM)
        if self.hold_jobs.is_set():
            return
        for job in jobs:
            name = job["metadata"]["name"]
            if name in self.jobs_run:
                continue
            self.jobs_run.append(name)
            thread = threading.Thread(target=self._run_job_reporting, args=(job,), daemon=True, name=name)
            thread.start()

    def _run_job_reporting(self, job: dict[str, Any]) -> None:
        try:
            self._run_job(job)
        except Exception as exc:  # the test reads the errors
            self.errors.append(f"Job {job['metadata']['name']}: {type(exc).__name__}: {exc}")

    def _run_job(self, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        pod_spec = job["spec"]["template"]["spec"]
        if not self._fitting_nodes(pod_spec):
            self.jobs_run.remove(name)  # the scheduler keeps trying
            if self.api.get(f"/api/v1/namespaces/{NS}/pods/{name}-pending") is None:
                labels = {**job["spec"]["template"]["metadata"]["labels"], "job-name": name}
                self._ensure_pod_object(f"{name}-pending", {"metadata": {"labels": labels}}, 0, 0)
                message = self._unschedulable(pod_spec, 0)
                self._patch_pod_status(f"{name}-pending", {"phase": "Pending", "conditions": [message]})
            return
        container = pod_spec["containers"][0]
        scratch = self._root / "jobs" / name
        mounts = self._mounts(pod_spec, container, scratch)
        termination = scratch / "termination-log"
        mounts[container["terminationMessagePath"]] = str(termination)
        env = self._environment(container)
        assert self.front is not None
        account = self.front.mount(pod_spec, scratch / "serviceaccount")
        if account is not None:
            mounts[ACCOUNT_DIR] = str(account)
            env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(self.front.port))
        command = [self._mapped(a, mounts) for a in container["command"]]
        started = _now()
        process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.job_processes[name] = process
        stdout, stderr = process.communicate(timeout=120)
        scratch.mkdir(parents=True, exist_ok=True)
        (scratch / "log").write_text(stdout + stderr)
        if self.api.get(f"/apis/batch/v1/namespaces/{NS}/jobs/{name}") is None:
            self.jobs_done[name] = process.returncode
            return  # deleted while it ran: no pod status to report
        done = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
        message = termination.read_text() if termination.exists() else ""
        if not message and done.returncode != 0:  # terminationMessagePolicy: FallbackToLogsOnError
            message = (done.stdout + done.stderr)[-2048:]
        self.api.create(
            f"/api/v1/namespaces/{NS}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-pod",
                    "namespace": NS,
                    "labels": {**job["spec"]["template"]["metadata"]["labels"], "job-name": name},
                },
                "spec": {"containers": [{"name": container["name"], "image": container["image"]}]},
            },
        )
        self.api.patch(
            f"/api/v1/namespaces/{NS}/pods/{name}-pod/status",
            {
                "status": {
                    "phase": "Succeeded" if done.returncode == 0 else "Failed",
                    "containerStatuses": [
                        {
                            "name": container["name"],
                            "state": {
                                "terminated": {
                                    "exitCode": done.returncode,
                                    "message": message,
                                    "finishedAt": _now(),
                                }
                            },
                        }
                    ],
                }
            },
        )
        ok = done.returncode == 0
        self.api.patch(
            f"/apis/batch/v1/namespaces/{NS}/jobs/{name}/status",
            {
                "status": {
                    "startTime": started,
                    "completionTime": _now() if ok else None,
                    "succeeded": 1 if ok else None,
                    "failed": None if ok else 1,
                    "conditions": [{"type": "Complete" if ok else "Failed", "status": "True"}],
                }
            },
        )
        self.jobs_done[name] = done.returncode

    # ---- Deployments and their pods ---------------------------------------------------------------

    def _run_deployments(self) -> None:
        deployments = self.api.items(f"/apis/apps/v1/namespaces/{NS}/deployments")
        for deployment in deployments:
            self._reconcile_deployment(deployment)
        present = {d["metadata"]["name"] for d in deployments}
        for name in [n for n in self.pods if n not in present]:  # garbage collection of a deleted owner
            for pod in [*self.pods.pop(name), *([self.surges.pop(name)] if name in self.surges else [])]:
                self._remove_pod(pod)

    def _reconcile_deployment(self, deployment: dict[str, Any]) -> None:
        """Start pods up to ``replicas``; replace pods of an older template one at a time, the new pod
        first (maxSurge 1): it must be Ready before the old one goes."""
        name = deployment["metadata"]["name"]
        template = json.dumps(deployment["spec"]["template"], sort_keys=True)
        pods = self.pods.setdefault(name, [])
        replicas = int(deployment["spec"].get("replicas", 1))
        while len(pods) < replicas:
            pods.append(self._start_pod(deployment, self._pod_name(name)))
        while len(pods) > replicas:  # a ReplicaSet scales down the not-ready first, then the newest
            going = min(pods, key=lambda p: (p.ready, -p.started))
            pods.remove(going)
            self._remove_pod(going)
        stale = [p for p in pods if p.template != template]
        surge = self.surges.get(name)
        if stale and surge is None:
            self.surges[name] = self._start_pod(deployment, self._pod_name(name))
        elif surge is not None and (surge.template != template or surge.ready):
            if surge.template == template and stale:
                old = stale[0]
                pods[pods.index(old)] = surge
                self._remove_pod(old)
            else:
                self._remove_pod(surge)
            del self.surges[name]
        ready = 0
        for pod in [*pods, *([self.surges[name]] if name in self.surges else [])]:
            if pod.process.poll() is not None:  # crashed (e.g. no snapshot yet): restart it, like a kubelet
                if pod.ready or pod.container_ready:  # a dead container is not Ready: its endpoint goes
                    self._set_ready(pod, False)
                if not pod.pending and not pod.crash_reported:
                    pod.crash_reported, pod.attempted = True, time.monotonic()
                    self._crashed(pod)
                back_off = 1.0 if pod.pending else min(2.0**pod.restarts, 8.0)  # the kubelet doubles it
                if time.monotonic() - pod.attempted < back_off:
                    continue
                restarted = self._start_pod(deployment, pod.name, pod.port, pod.template, pod.restarts + 1)
                restarted.started = pod.started
                if pod in pods:
                    pods[pods.index(pod)] = restarted
                else:
                    self.surges[name] = restarted
                self._set_ready(restarted, False)
                continue
            self._set_ready(pod, _answers(f"{pod.url}/v2/health/ready"))
            ready += int(pod.ready)
        deadline = float(deployment["spec"].get("progressDeadlineSeconds", 600))
        mine = [*pods, *([self.surges[name]] if name in self.surges else [])]
        late = [p for p in mine if not p.ready and time.monotonic() - p.started > deadline]
        conditions = []
        if late:
            conditions = [
                {
                    "type": "Progressing",
                    "status": "False",
                    "reason": "ProgressDeadlineExceeded",
                    "message": f'ReplicaSet "{name}-{late[0].name}" has timed out progressing.',
                }
            ]
        status = {
            "conditions": conditions,
            "replicas": len(pods) + int(name in self.surges),
            "readyReplicas": ready,
            "updatedReplicas": sum(p.template == template for p in pods),
            "availableReplicas": ready,
            "observedGeneration": deployment["metadata"].get("generation", 1),
        }
        if any(deployment.get("status", {}).get(k) != v for k, v in status.items()):
            self.api.patch(f"/apis/apps/v1/namespaces/{NS}/deployments/{name}/status", {"status": status})

    def _pod_name(self, deployment: str) -> str:
        """``vision-0``, ``vision-1``, ...: never reused, as a ReplicaSet's random suffixes are not."""
        n = self.pod_counts.get(deployment, 0)
        self.pod_counts[deployment] = n + 1
        return f"{deployment}-{n}"

    def _remove_pod(self, pod: ServerPod) -> None:
        """Graceful deletion as the API server and kubelet do it: the Pod object goes first (endpoint
        controllers drop it, with their lag), then the container's preStop hook runs and only then the
        container gets SIGTERM, SIGKILL after ``terminationGracePeriodSeconds`` in all."""
        self.api.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{pod.name}")
        self.removed.append(pod)
        spec = self.specs.get(pod.name) or {}
        thread = threading.Thread(target=_terminate, args=(pod, spec), daemon=True, name=f"stop-{pod.name}")
        thread.start()
        self.terminating.append(thread)

    def _run_init(
        self, template: dict[str, Any], container: dict[str, Any], scratch: Path, node: str | None = None
    ) -> tuple[bool, str]:
        """Run one init container to completion, as the kubelet does before the server starts."""
        mounts = self._mounts(template["spec"], container, scratch, node)
        termination = scratch / f"{container['name']}-termination-log"
        termination.unlink(missing_ok=True)
        mounts[container.get("terminationMessagePath", "/dev/termination-log")] = str(termination)
        command = [self._mapped(a, mounts) for a in [*container["command"], *container.get("args", [])]]
        done = subprocess.run(command, env=self._environment(container), capture_output=True, text=True)
        message = termination.read_text().strip() if termination.exists() else ""
        if not message and done.returncode != 0:
            message = (done.stdout + done.stderr)[-2048:]
        return done.returncode == 0, message

    # ---- the scheduler and the attach controller, as far as status needs them --------------------------

    def _fitting_nodes(self, pod_spec: dict[str, Any]) -> list[str]:
        selector = pod_spec.get("nodeSelector") or {}
        return [n for n, labels in self.nodes.items() if all(labels.get(k) == v for k, v in selector.items())]

    def _unschedulable(self, pod_spec: dict[str, Any], gpus: int) -> dict[str, Any]:
        """The PodScheduled condition the scheduler writes, in its words."""
        fitting = self._fitting_nodes(pod_spec)
        parts = []
        if len(fitting) < len(self.nodes):
            parts.append(
                f"{len(self.nodes) - len(fitting)} node(s) didn't match Pod's node affinity/selector"
            )
        if fitting and gpus:
            parts.append(f"{len(fitting)} Insufficient nvidia.com/gpu")
        message = f"0/{len(self.nodes)} nodes are available: " + ", ".join(parts) + "."
        return {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}

    def _live_pods(self) -> list[ServerPod]:
        everything = [*(p for pods in self.pods.values() for p in pods), *self.surges.values()]
        return [p for p in everything if not p.pending]

    def _schedule(self, name: str, pod_spec: dict[str, Any], gpus: int, deployment: str) -> str | None:
        """A node with room for ``gpus``, spreading a Deployment's pods over the nodes; None if none."""
        everything = [*(p for pods in self.pods.values() for p in pods), *self.surges.values()]
        live = [p for p in everything if p.name != name and p.node is not None]
        used = {n: sum(p.gpus for p in live if p.node == n) for n in self.nodes}
        mine = {
            n: sum(1 for p in live if p.node == n and p.name.startswith(f"{deployment}-")) for n in self.nodes
        }
        fitting = [n for n in self._fitting_nodes(pod_spec) if used[n] + gpus <= self.gpus_per_node]
        return min(fitting, key=lambda n: (mine[n], n)) if fitting else None

    def _attach_conflict(self, name: str, node: str, pod_spec: dict[str, Any]) -> str | None:
        """A ReadWriteOnce claim already attached to another node: the attach controller's message."""
        for volume in pod_spec.get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim:
                continue
            pvc = self.api.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/{claim}") or {}
            modes = set((pvc.get("spec") or {}).get("accessModes") or ["ReadWriteMany"])
            if modes & {"ReadWriteMany", "ReadOnlyMany"} or self.local_volume(claim) is not None:
                continue  # a local volume is never attached: each node has its own
            others = [
                p.name for p in self._live_pods() if p.name != name and p.node != node and claim in p.claims
            ]
            if others:
                return (
                    f'Multi-Attach error for volume "pvc-{claim}" Volume is already used by pod(s) '
                    + ", ".join(sorted(others))
                )
        return None

    def _pending(
        self,
        name: str,
        port: int,
        key: str,
        scratch: Path,
        status: dict[str, Any],
        node: str | None = None,
        gpus: int = 0,
    ) -> ServerPod:
        """A pod that does not run; once scheduled it holds its node's GPUs all the same."""
        self._patch_pod_status(name, {"phase": "Pending", **status})
        placeholder = subprocess.Popen(["true"])
        placeholder.wait()
        return ServerPod(
            name, port, placeholder, scratch / "server.log", key, node=node, gpus=gpus, pending=True
        )

    def _start_pod(
        self,
        deployment: dict[str, Any],
        name: str,
        port: int | None = None,
        template_key: str | None = None,
        restarts: int = 0,
    ) -> ServerPod:
        created = time.monotonic()  # the pod's creation: its init containers run after it
        template = deployment["spec"]["template"]
        key = template_key or json.dumps(template, sort_keys=True)
        container = template["spec"]["containers"][0]
        scratch = self._root / "pods" / name
        port = port or free_port()
        grpc_port, metrics_port = free_port(), free_port()
        self.specs[name] = template["spec"]
        self._ensure_pod_object(name, template, port, grpc_port, metrics_port)
        gpus = int(((container.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu") or 0)
        node = self._schedule(name, template["spec"], gpus, deployment["metadata"]["name"])
        if node is None:
            return self._pending(
                name, port, key, scratch, {"conditions": [self._unschedulable(template["spec"], gpus)]}
            )
        scheduled = {"conditions": [{"type": "PodScheduled", "status": "True"}], "nodeName": node}
        if container.get("image") in self.missing_images:
            waiting = {
                "reason": "ImagePullBackOff",
                "message": f'Back-off pulling image "{container["image"]}"',
            }
            statuses = [{"name": "server", "ready": False, "state": {"waiting": waiting}}]
            return self._pending(
                name, port, key, scratch, {**scheduled, "containerStatuses": statuses}, node, gpus
            )
        conflict = self._attach_conflict(name, node, template["spec"])
        if conflict is not None:
            if (name, conflict) not in self.posted:  # the API server counts repeats on one Event
                self.posted.add((name, conflict))
                self._event(name, "FailedAttachVolume", conflict)
            statuses = [
                {"name": "server", "ready": False, "state": {"waiting": {"reason": "ContainerCreating"}}}
            ]
            return self._pending(
                name, port, key, scratch, {**scheduled, "containerStatuses": statuses}, node, gpus
            )
        for init in template["spec"].get("initContainers") or []:
            if "command" not in init:
                continue
            ok, message = self._run_init(template, init, scratch, node)
            self.init_messages.setdefault(name, []).append(message)
            if not ok:  # the kubelet retries it with a back-off; the next loop tries again
                self._patch_pod_status(
                    name,
                    {
                        "initContainerStatuses": [
                            {
                                "name": init["name"],
                                "ready": False,
                                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                "lastState": {"terminated": {"exitCode": 1, "message": message}},
                            }
                        ]
                    },
                )
                failed = subprocess.Popen(["true"])
                failed.wait()
                return ServerPod(name, port, failed, scratch / "server.log", key)
        mounts = self._mounts(template["spec"], container, scratch, node)
        args = [self._mapped(a, mounts) for a in container.get("args") or []]
        args += [
            f"--http-port={port}",
            f"--grpc-port={grpc_port}",
            f"--metrics-port={metrics_port}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
        ]
        log = scratch / "server.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                [*container["command"], *args],
                env=self._environment(container),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        claims = {
            v["persistentVolumeClaim"]["claimName"]
            for v in template["spec"].get("volumes") or []
            if "persistentVolumeClaim" in v
        }
        self._patch_pod_status(
            name,
            {
                "phase": "Running",
                "nodeName": node,
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "False"},
                ],
                "containerStatuses": [
                    {"name": "server", "ready": False, "restartCount": restarts, "state": {"running": {}}}
                ],
            },
        )
        return ServerPod(
            name,
            port,
            process,
            log,
            key,
            grpc_port,
            node=node,
            gpus=gpus,
            claims=claims,
            started=created,
            metrics_port=metrics_port,
            restarts=restarts,
        )

    def _event(self, pod: str, reason: str, message: str) -> None:
        self.api.create(
            f"/api/v1/namespaces/{NS}/events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{pod}.", "namespace": NS},
                "involvedObject": {"kind": "Pod", "name": pod, "namespace": NS},
                "reason": reason,
                "message": message,
                "type": "Warning",
                "lastTimestamp": _now(),
            },
        )

    def _crashed(self, pod: ServerPod) -> None:
        """What the kubelet reports for a server that exited: CrashLoopBackOff with its last log lines
        as the termination message (terminationMessagePolicy: FallbackToLogsOnError)."""
        tail = pod.log.read_text(errors="replace")[-1500:] if pod.log.exists() else ""
        status = {
            "name": "server",
            "ready": False,
            "state": {
                "waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting failed container"}
            },
            "lastState": {"terminated": {"exitCode": pod.process.returncode, "message": tail}},
            "restartCount": pod.restarts,
        }
        self._patch_pod_status(pod.name, {"containerStatuses": [status]})

    def _ensure_pod_object(
        self, name: str, template: dict[str, Any], port: int, grpc_port: int, metrics_port: int = 0
    ) -> None:
        ports = [{"name": "http", "containerPort": port}, {"name": "grpc", "containerPort": grpc_port}]
        if metrics_port:
            ports.append({"name": "metrics", "containerPort": metrics_port})
        gates = list(template.get("spec", {}).get("readinessGates") or [])
        if self.api.get(f"/api/v1/namespaces/{NS}/pods/{name}") is not None:  # a restarted container
            self.api.patch(
                f"/api/v1/namespaces/{NS}/pods/{name}",
                {"spec": {"containers": [{"name": "server", "ports": ports}]}},
            )
            return
        metadata = {"name": name, "namespace": NS, "labels": template["metadata"]["labels"]}
        if template["metadata"].get("annotations"):
            metadata["annotations"] = template["metadata"]["annotations"]
        self.api.create(
            f"/api/v1/namespaces/{NS}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": metadata,
                "spec": {
                    "containers": [{"name": "server", "ports": ports}],
                    **({"readinessGates": gates} if gates else {}),
                },
            },
        )
        self._patch_pod_status(
            name,
            {"podIP": "127.0.0.1", "phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]},
        )

    def _patch_pod_status(self, name: str, status: dict[str, Any]) -> None:
        self.api.patch(f"/api/v1/namespaces/{NS}/pods/{name}/status", {"status": status})

    def _set_ready(self, pod: ServerPod, container_ready: bool) -> None:
        """The kubelet's readiness: ``ContainersReady`` from the probe, ``Ready`` only with every readiness
        gate's condition True as well. Conditions others wrote (the gates) are kept; the write is a JSON
        patch that tests the list it replaces, so a gate written meanwhile is never lost (the next loop
        computes again)."""
        obj = self.api.get(f"/api/v1/namespaces/{NS}/pods/{pod.name}")
        if obj is None:
            return
        gates = [g["conditionType"] for g in (obj.get("spec") or {}).get("readinessGates") or []]
        current = list((obj.get("status") or {}).get("conditions") or [])
        by_type = {c["type"]: c for c in current}
        ready = container_ready and all(by_type.get(g, {}).get("status") == "True" for g in gates)
        if self.kubelet_lag and pod.ready and not ready and container_ready == pod.container_ready:
            now = time.monotonic()  # only a gate closed: the kubelet reports it ``kubelet_lag`` late
            pod.gate_changed = pod.gate_changed or now
            if now - pod.gate_changed < self.kubelet_lag:
                ready = pod.ready
        else:
            pod.gate_changed = None
        pod.container_ready = container_ready
        if ready and pod.ready_at is None:
            pod.ready_at = time.monotonic()
        owned = {"PodScheduled", "ContainersReady", "Ready"}
        conditions = [
            *([{"type": "PodScheduled", "status": "True"}] if pod.node else []),
            {"type": "ContainersReady", "status": "True" if container_ready else "False"},
            {"type": "Ready", "status": "True" if ready else "False"},
            *(c for c in current if c["type"] not in owned),
        ]
        if conditions == current and ready == pod.ready:
            return
        patch = [
            {"op": "test", "path": "/status/conditions", "value": current},
            {"op": "replace", "path": "/status/conditions", "value": conditions},
        ]
        if not current:
            patch = [{"op": "add", "path": "/status/conditions", "value": conditions}]
        try:
            self.api.request(
                "PATCH",
                f"/api/v1/namespaces/{NS}/pods/{pod.name}/status",
                patch,
                "application/json-patch+json",
            )
        except urllib.error.HTTPError:
            return  # someone wrote the list meanwhile: the next loop reads it again
        pod.ready = ready


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _terminate(pod: ServerPod, spec: dict[str, Any]) -> None:
    """preStop, then SIGTERM, then SIGKILL once the grace period is over (30 s, Kubernetes' default)."""
    deadline = time.monotonic() + float(spec.get("terminationGracePeriodSeconds", 30))
    container = (spec.get("containers") or [{}])[0]
    hook = ((container.get("lifecycle") or {}).get("preStop") or {}).get("exec")
    if hook and pod.process.poll() is None:
        subprocess.run(hook["command"], timeout=max(1.0, deadline - time.monotonic()), check=False)
    if pod.process.poll() is None:  # SIGTERM goes to the container's main process only, SIGKILL to all
        pod.process.send_signal(signal.SIGTERM)
        try:
            pod.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(pod.process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    pod.process.wait()


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
