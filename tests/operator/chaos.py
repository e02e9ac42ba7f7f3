"""Helpers of the chaos scenarios: the operator as a process that can be SIGKILLed, a TCP proxy that cuts
the S3 server off, and one scenario's repository and InferenceService.

The operator runs as ``python -m naiad_operator`` (what the container runs), not in the test process,
because the faults are process deaths: a SIGKILL gives it no chance to finish a step or write status.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.operator.cluster import NS, Api
from tests.operator.harness import BUCKET, GROUP_PATH
from tests.operator.load import versioned_py
from tests.support.models import identity_config
from tests.support.server import free_port

#: ``make test-operator-chaos`` sets this to ``long``: every stage, more traffic; ``make test`` runs the
#: short profile (one instance of each fault kind).
LONG = os.environ.get("NAIAD_CHAOS_PROFILE", "short") == "long"


class OperatorProcess:
    """One operator replica: ``start()``, ``kill()`` (SIGKILL), ``stop()`` (SIGTERM)."""

    def __init__(self, kubeconfig: Path, log_dir: Path, identity: str, env: dict[str, str] | None = None):
        self.kubeconfig, self.identity = kubeconfig, identity
        self.log = log_dir / f"operator-{identity}.log"
        self.env = env or {}
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.liveness = ""
        """The ``--liveness`` URL of the current start (what the chart's probe calls)."""

    def start(self) -> OperatorProcess:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "NAIAD_OPERATOR_NAMESPACES": f'["{NS}"]',
            "NAIAD_OPERATOR_RECONCILE_INTERVAL": "1",
            "NAIAD_OPERATOR_SYNC_POLL_INTERVAL": "0.5",
            "NAIAD_OPERATOR_SYNC_RETRY_SECONDS": "2",
            "NAIAD_OPERATOR_SYNC_RETRY_MAX_SECONDS": "4",
            "NAIAD_OPERATOR_METRICS_PORT": str(free_port()),
            "NAIAD_OPERATOR_LEADER_ELECTION": "true",
            "NAIAD_OPERATOR_LEADER_IDENTITY": self.identity,
            "NAIAD_OPERATOR_LEADER_LEASE_SECONDS": "4",
            "NAIAD_OPERATOR_LEADER_RENEW_SECONDS": "1",
            **self.env,
        }
        self.starts += 1
        self.liveness = f"http://127.0.0.1:{free_port()}/healthz"
        with self.log.open("ab") as out:
            out.write(f"---- start {self.starts} ----\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "naiad_operator",
                    "--liveness",
                    self.liveness,
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no cleanup, no last status write, exactly a node or OOM kill."""
        if self.alive:
            assert self.process is not None
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.alive:
            assert self.process is not None
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Cutter:
    """A TCP proxy in front of the S3 server that the test can cut: while cut it resets every open
    connection and refuses new ones, as a dropped route or a dead load balancer does."""

    def __init__(self, target: str) -> None:
        host, _, port = target.removeprefix("http://").partition(":")
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.cut = threading.Event()
        self.stalled = threading.Event()
        """Set by :meth:`arm` once the fault happened: the transfer it hit was under way."""
        self._budget: int | None = None
        self._stall = False
        self._flowing = threading.Event()
        self._flowing.set()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="s3-proxy").start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut.is_set():
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def arm(self, after_bytes: int, stall: bool = False) -> None:
        """Once ``after_bytes`` more bytes came back from S3, sever (or, with ``stall``, stop
        forwarding without closing anything: a sync that hangs mid-copy)."""
        self.stalled.clear()
        self._budget, self._stall = after_bytes, stall

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        downstream = source.getpeername()[1] == self.target[1]
        try:
            while data := source.recv(65536):
                self._flowing.wait()
                if downstream and self._budget is not None:
                    self._budget -= len(data)
                    if self._budget <= 0:
                        self._budget = None
                        if self._stall:
                            self._flowing.clear()
                        else:
                            self.sever()
                        self.stalled.set()
                        self._flowing.wait()
                        if self.cut.is_set():
                            return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with self._lock:
                    self._open.discard(s)
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def sever(self) -> None:
        self.cut.set()
        with self._lock:
            sockets = list(self._open)
        for s in sockets:
            _reset(s)

    def restore(self) -> None:
        self.cut.clear()
        self._flowing.set()

    def close(self) -> None:
        self.sever()
        self.listener.close()


def _reset(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()
    except OSError:
        pass


@dataclass
class Scenario:
    """One scenario's repository (its own prefix in the bucket) and InferenceService, both named
    ``name``, so scenarios sharing a cluster never see each other's objects."""

    api: Api
    s3: Any
    name: str
    model: str = "m"
    snapshot_before: str | None = None

    @property
    def prefix(self) -> str:
        return f"chaos/{self.name}"

    @property
    def selector(self) -> dict[str, str]:
        return {"serving.naiad.dev/inferenceservice": self.name}

    def upload(
        self,
        version: int,
        load_seconds: float = 0.0,
        fail: bool = False,
        exec_seconds: float = 0.0,
        weights: int = 0,
        model: str = "",
    ) -> None:
        """Version ``version`` of the scenario's model (or ``model``), with ``weights`` bytes of payload
        beside it (a sync that takes a while to copy)."""
        client = self.s3.client()
        model = model or self.model
        config = identity_config(model, "TYPE_FP32")
        client.put_object(Bucket=BUCKET, Key=f"{self.prefix}/{model}/config.pbtxt", Body=config.encode())
        client.put_object(
            Bucket=BUCKET,
            Key=f"{self.prefix}/{model}/{version}/model.py",
            Body=versioned_py(load_seconds, fail, exec_seconds).encode(),
        )
        if weights:
            client.put_object(
                Bucket=BUCKET, Key=f"{self.prefix}/{model}/{version}/weights.bin", Body=os.urandom(weights)
            )

    def create(self, replicas: int = 2, endpoint: str | None = None, **repository: Any) -> None:
        self.api.create(
            f"{GROUP_PATH}/modelrepositories",
            {
                "apiVersion": "serving.naiad.dev/v1alpha1",
                "kind": "ModelRepository",
                "metadata": {"name": self.name, "namespace": NS},
                "spec": {
                    "source": {
                        "uri": f"s3://{BUCKET}/{self.prefix}",
                        "endpoint": endpoint or self.s3.endpoint,
                        "credentials": {"secretRef": {"name": "s3-creds"}},
                    },
                    "storage": {"mode": "shared", "accessModes": ["ReadWriteMany"]},
                    **repository,
                },
            },
        )
        self.api.create(
            f"{GROUP_PATH}/inferenceservices",
            {
                "apiVersion": "serving.naiad.dev/v1alpha1",
                "kind": "InferenceService",
                "metadata": {"name": self.name, "namespace": NS},
                "spec": {
                    "repository": {"name": self.name},
                    "models": [{"name": self.model}],
                    "replicas": replicas,
                },
            },
        )

    def trigger(self, value: str) -> None:
        self.api.patch(f"{GROUP_PATH}/modelrepositories/{self.name}", {"spec": {"sync": {"trigger": value}}})

    def repository(self) -> dict[str, Any]:
        return (self.api.get(f"{GROUP_PATH}/modelrepositories/{self.name}") or {}).get("status") or {}

    def service(self) -> dict[str, Any]:
        return (self.api.get(f"{GROUP_PATH}/inferenceservices/{self.name}") or {}).get("status") or {}

    def record(self) -> dict[str, Any]:
        return next((m for m in self.service().get("models") or [] if m["name"] == self.model), {})

    def condition(self, kind: str, plural: str = "inferenceservices") -> dict[str, Any]:
        status = self.repository() if plural == "modelrepositories" else self.service()
        return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})

    def delete(self) -> None:
        """The service, its Deployment (KMock has no garbage collector) and the repository."""
        self.api.request("DELETE", f"{GROUP_PATH}/inferenceservices/{self.name}")
        self.api.request("DELETE", f"/apis/apps/v1/namespaces/{NS}/deployments/{self.name}")
        self.api.request("DELETE", f"{GROUP_PATH}/modelrepositories/{self.name}")


def timed(start: float) -> float:
    return time.monotonic() - start
