"""Traffic for the chaos scenarios: several tritonclient clients (HTTP and gRPC) sending inferences to an
InferenceService's endpoints from before a scenario starts until after it converged, every answer checked.

The endpoints are what kube-proxy would route the Service to: the pods that carry the Service's selector
labels, are Ready and are not being deleted, read from the API server (not from the fake cluster's own
bookkeeping) and refreshed with a lag, as endpoint propagation has one. A pod that goes away is therefore
still sent requests for a moment after its Pod object is deleted, which is what a graceful drain must
cover.

The model the scenarios serve (:data:`VERSIONED_PY`) answers ``input + 1000 * version``, so every answer
shows which version computed it, independently of the ``model_version`` field it reports.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.operator.cluster import NS, Api

#: A model whose answer depends on its version; ``LOAD_SECONDS`` makes a load take long enough for a
#: fault to land in the middle of it, ``FAIL`` makes it refuse to load, ``EXEC_SECONDS`` keeps each
#: request in flight for a while (a pod that goes away has requests to finish), ``BALLAST`` bytes are
#: written at load (resident: the footprint the server measures).
VERSIONED_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils

LOAD_SECONDS = {load_seconds}
FAIL = {fail}
EXEC_SECONDS = {exec_seconds}
BALLAST = {ballast}


class TritonPythonModel:
    def initialize(self, args):
        self.weights = np.ones(BALLAST, dtype=np.uint8)
        time.sleep(LOAD_SECONDS)
        if FAIL:
            raise RuntimeError("weights are corrupt")
        self.offset = 1000.0 * int(args["model_version"])

    def execute(self, requests):
        time.sleep(EXEC_SECONDS)
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", tensor + self.offset)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


def versioned_py(
    load_seconds: float = 0.0,
    fail: bool = False,
    exec_seconds: float = 0.0,
    ballast: int = 0,
) -> str:
    return VERSIONED_PY.format(
        load_seconds=load_seconds, fail=fail, exec_seconds=exec_seconds, ballast=ballast
    )


@dataclass(frozen=True)
class Endpoint:
    pod: str
    http: str
    grpc: str


@dataclass(frozen=True)
class Answer:
    """One request as the client saw it: when it was sent and answered, by which pod and version."""

    client: str
    pod: str
    sent: float
    done: float
    version: int | None
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


def ready_endpoints(api: Api, selector: dict[str, str]) -> list[Endpoint]:
    """The Service's endpoints as an EndpointSlice controller computes them from Pod objects."""
    endpoints = []
    for pod in api.items(f"/api/v1/namespaces/{NS}/pods"):
        meta, status = pod["metadata"], pod.get("status") or {}
        labels = meta.get("labels") or {}
        if any(labels.get(k) != v for k, v in selector.items()) or meta.get("deletionTimestamp"):
            continue
        if not any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []):
            continue
        ports = {
            p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports") or []
        }
        if "http" in ports and "grpc" in ports:
            ip = status.get("podIP", "127.0.0.1")
            endpoints.append(Endpoint(meta["name"], f"{ip}:{ports['http']}", f"{ip}:{ports['grpc']}"))
    return sorted(endpoints, key=lambda e: e.pod)


class Load:
    """``with Load(api, selector, model) as load: ...``; then :meth:`summary` and the checks."""

    def __init__(
        self,
        api: Api,
        selector: dict[str, str],
        model: str,
        *,
        http_clients: int = 2,
        grpc_clients: int = 2,
        propagation: float = 0.5,
        pause: float = 0.01,
    ) -> None:
        self.api, self.selector, self.model = api, selector, model
        self.propagation, self.pause = propagation, pause
        self.answers: list[Answer] = []
        self.endpoints: list[Endpoint] = []
        self.samples: list[tuple[float, str, frozenset[int]]] = []
        """(when the index request was sent, pod, versions READY there), for :meth:`early`."""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._refresh, daemon=True, name="endpoints"),
            threading.Thread(target=self._watch_indexes, daemon=True, name="indexes"),
            *(
                threading.Thread(target=self._client, args=(f"http-{n}", self._http), daemon=True)
                for n in range(http_clients)
            ),
            *(
                threading.Thread(target=self._client, args=(f"grpc-{n}", self._grpc), daemon=True)
                for n in range(grpc_clients)
            ),
        ]

    def __enter__(self) -> Load:
        self.endpoints = ready_endpoints(self.api, self.selector)
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _refresh(self) -> None:
        while not self._stop.wait(self.propagation):
            try:
                self.endpoints = ready_endpoints(self.api, self.selector)
            except OSError:  # the API server is busy: keep routing to the last endpoints, as kube-proxy does
                continue

    def _watch_indexes(self) -> None:
        while not self._stop.wait(0.1):
            for endpoint in self.endpoints:
                sent = time.monotonic()
                try:
                    with urllib.request.urlopen(
                        urllib.request.Request(
                            f"http://{endpoint.http}/v2/repository/index", b"{}", method="POST"
                        ),
                        timeout=10,
                    ) as r:
                        entries = json.loads(r.read())
                except OSError:
                    continue
                ready = frozenset(
                    int(e["version"])
                    for e in entries
                    if e["name"] == self.model and e.get("state") == "READY" and e.get("version")
                )
                self.samples.append((sent, endpoint.pod, ready))

    def _client(self, name: str, send: Callable[[dict[str, Any], Endpoint, float], int]) -> None:
        clients: dict[str, Any] = {}
        try:
            self._send_until_stopped(name, send, clients)
        finally:  # (a client left to the collector warns of its open socket wherever that runs)
            for client in clients.values():
                client.close()

    def _send_until_stopped(
        self, name: str, send: Callable[[dict[str, Any], Endpoint, float], int], clients: dict[str, Any]
    ) -> None:
        n = 0
        while not self._stop.is_set():
            endpoints = self.endpoints
            sent = time.monotonic()
            if not endpoints:
                self._record(Answer(name, "", sent, sent, None, "no ready endpoint"))
                self._stop.wait(0.05)
                continue
            endpoint = endpoints[n % len(endpoints)]
            n += 1
            value = float(n % 997)
            try:
                version = send(clients, endpoint, value)
                self._record(Answer(name, endpoint.pod, sent, time.monotonic(), version))
            except Exception as exc:
                self._record(
                    Answer(name, endpoint.pod, sent, time.monotonic(), None, f"{type(exc).__name__}: {exc}")
                )
                dropped = clients.pop(endpoint.pod, None)
                if dropped is not None:
                    dropped.close()
            self._stop.wait(self.pause)

    def _record(self, answer: Answer) -> None:
        with self._lock:
            self.answers.append(answer)

    def _http(self, clients: dict[str, Any], endpoint: Endpoint, value: float) -> int:
        client = clients.get(endpoint.pod)
        if client is None:
            client = clients[endpoint.pod] = httpclient.InferenceServerClient(
                endpoint.http, connection_timeout=10, network_timeout=30
            )
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.float32))
        result = client.infer(self.model, [tensor])
        return _checked(value, result.as_numpy("OUTPUT0"), result.get_response()["model_version"])

    def _grpc(self, clients: dict[str, Any], endpoint: Endpoint, value: float) -> int:
        client = clients.get(endpoint.pod)
        if client is None:
            client = clients[endpoint.pod] = grpcclient.InferenceServerClient(endpoint.grpc)
        tensor = grpcclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.float32))
        result = client.infer(self.model, [tensor], client_timeout=30)
        return _checked(value, result.as_numpy("OUTPUT0"), result.get_response().model_version)

    # ---- what the scenario checks ---------------------------------------------------------------------

    def failures(self) -> list[Answer]:
        return [a for a in self.answers if not a.ok]

    def versions(self) -> set[int | None]:
        return {a.version for a in self.answers if a.ok}

    def early(self, version: int) -> list[Answer]:
        """Answers of ``version`` completed before an index request that found ``version`` not yet READY
        on some serving pod: the new default was pinned before the new version was up everywhere."""
        pending = [sent for sent, _, ready in self.samples if version not in ready]
        if not pending:
            return []
        last_pending = max(pending)
        return [a for a in self.answers if a.ok and a.version == version and a.done < last_pending]

    def wait_for(self, what: Callable[[list[Answer]], bool], timeout: float, label: str) -> None:
        """Wait until the answers so far satisfy ``what`` (e.g. a version answered from every pod)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                answers = list(self.answers)
            if what(answers):
                return
            time.sleep(0.1)
        raise AssertionError(f"traffic never showed {label}; last answers: {self.answers[-5:]}")

    def summary(self, scenario: str, converged: float) -> str:
        failed = self.failures()
        by_version: dict[int | None, int] = {}
        for answer in self.answers:
            if answer.ok:
                by_version[answer.version] = by_version.get(answer.version, 0) + 1
        return (
            f"[chaos] {scenario}: {len(self.answers)} requests, {len(failed)} failed, "
            f"converged in {converged:.1f} s, answers by version {dict(sorted(by_version.items()))}"
        )


def _checked(value: float, output: Any, reported: str) -> int:
    """The version that computed the answer; a wrong value or a mismatched reported version fails."""
    computed = float(output[0]) - value
    version = round(computed / 1000.0)
    if computed != version * 1000.0 or version < 1:
        raise AssertionError(f"wrong answer {float(output[0])} for input {value}")
    if str(reported) != str(version):
        raise AssertionError(f"answer of version {version} reported as version {reported}")
    return version
