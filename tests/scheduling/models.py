"""Purpose-made models for the scheduling tests, and the client side of their protocol.

One Python model, ``PROBE_PY``, serves every scheduling test: it reports how it was executed (how many
requests and rows its batch had, the execution's ordinal, its process id), logs the ids it executed,
and takes its behaviour from request parameters: ``gate`` (block until a file exists), ``sleep``,
``barrier`` (block until ``parties`` executions have reached it), ``watch_cancel`` (wait for
``is_cancelled()``), ``fail`` (a per-request error) and ``raise`` (an exception for the whole batch).
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from tests.support.http import RawClient, RawResponse
from tests.support.models import write_model

PROBE_PY = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.log_path = os.path.join(args["model_repository"], "executed.log")
        self.executions = 0

    def log(self, text):
        with open(self.log_path, "a") as log:
            log.write(text + "\\n")

    def execute(self, requests):
        self.executions += 1
        rows = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy().shape[0] for r in requests]
        for request in requests:
            self.log(request.request_id())
        errors = {}
        for index, request in enumerate(requests):
            params = json.loads(request.parameters())
            if "gate" in params:
                open(params["gate"] + ".entered", "w").close()
                deadline = time.monotonic() + 30
                while not os.path.exists(params["gate"]) and time.monotonic() < deadline:
                    time.sleep(0.005)
            if "sleep" in params:
                time.sleep(params["sleep"])
            if "barrier" in params:
                folder = params["barrier"]
                os.makedirs(folder, exist_ok=True)
                open(os.path.join(folder, request.request_id()), "w").close()
                sum(i * i for i in range(100000))  # some CPU work, in parallel when processes are
                deadline = time.monotonic() + 20
                while len(os.listdir(folder)) < params["parties"]:
                    if time.monotonic() > deadline:
                        errors[index] = "the barrier was not met"
                        break
                    time.sleep(0.002)
            if "watch_cancel" in params:
                self.log(request.request_id() + " entered")
                deadline = time.monotonic() + 20
                while not request.is_cancelled() and time.monotonic() < deadline:
                    time.sleep(0.01)
                self.log(request.request_id() + (" cancelled" if request.is_cancelled() else " timeout"))
            if "raise" in params:
                raise RuntimeError("the batch is broken")
            if "fail" in params:
                errors[index] = "this request is invalid"
        responses = []
        for index, (request, n) in enumerate(zip(requests, rows)):
            if index in errors:
                error = pb_utils.TritonError(errors[index], pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()

            def column(value):
                return np.full((n, 1), value, dtype=np.int32)

            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", x.copy()),
                pb_utils.Tensor("REQUESTS", column(len(requests))),
                pb_utils.Tensor("ROWS", column(sum(rows))),
                pb_utils.Tensor("EXECUTION", column(self.executions)),
                pb_utils.Tensor("PID", column(os.getpid())),
            ]))
        return responses
"""

_OUTPUTS = ("OUTPUT0", "REQUESTS", "ROWS", "EXECUTION", "PID")


def write_probe(repo: Path, name: str, *, max_batch_size: int = 8, count: int = 1, extra: str = "") -> Path:
    """A ``PROBE_PY`` model called ``name`` with the given scheduling settings (``extra`` config text)."""
    outputs = ", ".join(f'{{ name: "{o}" data_type: TYPE_INT32 dims: [ 1 ] }}' for o in _OUTPUTS)
    config = f"""
    name: "{name}"
    backend: "python"
    max_batch_size: {max_batch_size}
    input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
    output [ {outputs} ]
    instance_group [ {{ kind: KIND_CPU count: {count} }} ]
    {extra}
    """
    return write_model(repo, name, config, PROBE_PY)


def infer_body(request_id: str, rows: int = 1, value: int = 0, **parameters: Any) -> dict[str, Any]:
    return {
        "id": request_id,
        "parameters": parameters,
        "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [rows, 1], "data": [value] * rows}],
    }


def infer(
    url: str, model: str, request_id: str, rows: int = 1, value: int = 0, **parameters: Any
) -> RawResponse:
    """One JSON inference on a connection of its own (so that calls from threads run concurrently)."""
    client = RawClient(url, timeout=60)
    try:
        return client.post_json(
            f"/v2/models/{model}/infer", infer_body(request_id, rows, value, **parameters)
        )
    finally:
        client.close()


def outputs(response: RawResponse) -> dict[str, list[int]]:
    assert response.status == 200, response.body
    return {o["name"]: o["data"] for o in response.json()["outputs"]}


def send_and_abandon(url: str, model: str, request_id: str, linger: float = 0.3, **parameters: Any) -> None:
    """Send a request on a raw socket and close it without reading the response (a client that left)."""
    host, port = url.rsplit(":", 1)
    body = json.dumps(infer_body(request_id, **parameters)).encode()
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(head + body)
        time.sleep(linger)  # let the server read it and queue it


def executed(model_dir: Path) -> list[str]:
    """The request ids (and notes) the model logged, in order."""
    log = model_dir / "executed.log"
    return log.read_text().splitlines() if log.exists() else []


def wait_for(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {condition}")
        time.sleep(0.01)


class Gate:
    """A file-based gate: the model blocks on a request carrying ``params`` until :meth:`open`."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / f"gate-{uuid.uuid4().hex}"

    @property
    def params(self) -> dict[str, str]:
        return {"gate": str(self.path)}

    def wait_entered(self) -> None:
        wait_for(Path(f"{self.path}.entered").exists)

    def open(self) -> None:
        self.path.touch()


#: How long to let requests sent from threads reach the server's queue (generous: they are local).
SETTLE = 0.5
