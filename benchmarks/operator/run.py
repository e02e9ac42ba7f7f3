"""200 InferenceServices created at once against KMock: how fast and how quietly the operator reconciles.

Measures, with the operator as its own process (``python -m naiad_operator``, as in a cluster):

1. time from creating N InferenceServices (concurrently) until every one has a status written for its
   generation, and the operator's CPU time over that burst divided by N;
2. Kubernetes API calls per InferenceService per steady-state timer tick, split into reads and writes
   (the target is zero writes when nothing changed).

Server pods are simulated: one Pod object per InferenceService, all pointing at one small V2 repository
endpoint in this process (every model READY), so each tick also does its real index call per pod.
Usage: ``python benchmarks/operator/run.py [--services 200] [--interval 10] [--ticks 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aiohttp import web

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common.scratch import scratch  # noqa: E402
from tests.support.kmock_k8s import ApiServer  # noqa: E402
from tests.support.server import free_port  # noqa: E402

NS = "default"
GROUP = f"/apis/serving.naiad.dev/v1alpha1/namespaces/{NS}"
MODELS = ["alpha", "beta"]
WRITES = {"POST", "PATCH", "PUT", "DELETE"}


def _call(api: str, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{api}{path}", data=data, method=method)
    req.add_header("Content-Type", "application/json" if method == "POST" else "application/merge-patch+json")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"null")


class ModelServers:
    """One V2 endpoint answering for every simulated pod: each model's version 1 READY."""

    def __init__(self) -> None:
        self.port = free_port()
        self.index_calls = 0
        self._ready = threading.Event()
        threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True).start()
        self._ready.wait(10)

    async def _serve(self) -> None:
        async def index(_: web.Request) -> web.Response:
            self.index_calls += 1
            return web.json_response([{"name": m, "version": "1", "state": "READY"} for m in MODELS])

        app = web.Application()
        app.router.add_post("/v2/repository/index", index)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        self._ready.set()
        await asyncio.Event().wait()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _seed(api: str, n: int, server_port: int) -> None:
    _call(
        api,
        "POST",
        f"{GROUP}/modelrepositories",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "ModelRepository",
            "metadata": {"name": "models", "namespace": NS},
            "spec": {"source": {"uri": "s3://bucket/triton"}},
        },
    )
    _call(
        api,
        "PATCH",
        f"{GROUP}/modelrepositories/models/status",
        {
            "status": {
                "syncedGeneration": 1,
                "observedGeneration": 1,
                "phase": "Ready",
                "claimName": "models-repository",
                "snapshot": {"current": "sha256:s1", "available": ["sha256:s1"]},
                "conditions": [{"type": "Ready", "status": "True", "reason": "SnapshotAvailable"}],
                "models": [
                    {"name": m, "versions": [{"version": 1, "contentHash": f"sha256:{m}"}]} for m in MODELS
                ],
            }
        },
    )
    for i in range(n):
        name = f"svc-{i:03d}"
        _call(
            api,
            "POST",
            f"/api/v1/namespaces/{NS}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-0",
                    "namespace": NS,
                    "labels": {"serving.naiad.dev/inferenceservice": name},
                },
                "spec": {
                    "containers": [
                        {"name": "server", "ports": [{"name": "http", "containerPort": server_port}]}
                    ]
                },
            },
        )
        _call(
            api,
            "PATCH",
            f"/api/v1/namespaces/{NS}/pods/{name}-0/status",
            {"status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}},
        )


def _reconciled(api: str) -> int:
    items = _call(api, "GET", f"{GROUP}/inferenceservices")["items"]
    return sum(
        1 for i in items if (i.get("status") or {}).get("observedGeneration") == i["metadata"]["generation"]
    )


def _calls(server: ApiServer) -> Counter[tuple[str, str]]:
    assert server.emulator is not None
    return Counter(server.emulator.calls)


def _plural(path: str) -> str:
    """``/apis/apps/v1/namespaces/default/deployments/x`` -> ``deployments``."""
    parts = path.strip("/").split("/")
    at = parts.index("namespaces") + 2 if "namespaces" in parts else len(parts) - 1
    return parts[min(at, len(parts) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--interval", type=float, default=10.0, help="operator timer interval, seconds")
    parser.add_argument("--ticks", type=int, default=3, help="steady-state ticks to count API calls over")
    args = parser.parse_args()

    server = ApiServer(sorted((ROOT / "crds").glob("*.yaml"))).start()
    pods = ModelServers()
    _seed(server.url, args.services, pods.port)
    kubeconfig = server.kubeconfig(scratch("bench-operator-") / "config")
    env = dict(
        os.environ,
        KUBECONFIG=str(kubeconfig),
        PYTHONPATH=str(ROOT / "operator"),
        NAIAD_OPERATOR_RECONCILE_INTERVAL=str(args.interval),
        NAIAD_OPERATOR_NAMESPACES=json.dumps([NS]),
        NAIAD_OPERATOR_METRICS_PORT=str(free_port()),
    )
    log = Path(tempfile.mkstemp(prefix="naiad-operator-", suffix=".log")[1])
    with log.open("wb") as out:
        operator = subprocess.Popen(
            [sys.executable, "-m", "naiad_operator", f"--liveness=http://127.0.0.1:{free_port()}/healthz"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        time.sleep(3)  # started and idle: its watches are open
        cpu0, t0, here0 = _cpu_seconds(operator.pid), time.monotonic(), time.process_time()
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    lambda i: _call(
                        server.url,
                        "POST",
                        f"{GROUP}/inferenceservices",
                        {
                            "apiVersion": "serving.naiad.dev/v1alpha1",
                            "kind": "InferenceService",
                            "metadata": {"name": f"svc-{i:03d}", "namespace": NS},
                            "spec": {
                                "repository": {"name": "models"},
                                "models": [{"name": m} for m in MODELS],
                            },
                        },
                    ),
                    range(args.services),
                )
            )
        while _reconciled(server.url) < args.services:
            if operator.poll() is not None:
                raise RuntimeError(f"operator exited:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)  # listing 200 full objects is work for the emulator too: poll gently
        first, cpu = time.monotonic() - t0, _cpu_seconds(operator.pid) - cpu0
        emulator_cpu = time.process_time() - here0  # KMock (+ this script's clients), one Python thread
        time.sleep(args.interval * 1.5)  # every timer has fired at least once since; status has settled
        before, calls0, cpu1 = _calls(server), pods.index_calls, _cpu_seconds(operator.pid)
        time.sleep(args.interval * args.ticks)
        window = _calls(server) - before
        window[("GET", f"{GROUP}/inferenceservices")] = 0  # this script's own polling
        steady_cpu = _cpu_seconds(operator.pid) - cpu1
        passes = max(1, pods.index_calls - calls0)  # one index call per pass (one pod per service)
        total = sum(window.values())
        writes = sum(n for (method, _), n in window.items() if method in WRITES)
        by_kind = Counter()
        for (method, path), n in window.items():
            by_kind[f"{method} {_plural(path)}"] += n
        print(
            json.dumps(
                {
                    "services": args.services,
                    "first_full_reconcile_seconds": round(first, 2),
                    "operator_cpu_ms_per_reconcile": round(cpu / args.services * 1000, 2),
                    "operator_cpu_seconds_during_burst": round(cpu, 2),
                    "emulator_cpu_seconds_during_burst": round(emulator_cpu, 2),
                    "steady_passes_per_service_per_interval": round(passes / args.services / args.ticks, 2),
                    "steady_api_calls_per_pass": round(total / passes, 2),
                    "steady_api_writes_total": writes,
                    "steady_api_calls_by_kind_per_pass": {
                        k: round(n / passes, 2) for k, n in sorted(by_kind.items()) if n
                    },
                    "steady_operator_cpu_ms_per_pass": round(steady_cpu / passes * 1000, 2),
                },
                indent=2,
            )
        )
    finally:
        os.killpg(operator.pid, signal.SIGTERM)
        try:
            operator.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(operator.pid, signal.SIGKILL)
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
