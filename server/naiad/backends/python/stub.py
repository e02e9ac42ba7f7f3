"""The worker process of a Python model instance (``python -m naiad.backends.python.stub FD``).

Started by :class:`~naiad.backends.python.process.ProcessModelInstance` with one end of a socket
pair as ``FD``.  It loads the model with the same :class:`PythonModelInstance` the server uses in
process, then serves ``execute`` messages until told to close or until the server goes away (the
socket closes), so a worker never outlives its server.  SIGINT is ignored: a Ctrl-C reaches the
whole process group, and the server decides when its instances finish.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import sys
from multiprocessing.connection import Connection
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from naiad.backends.python import shm
from naiad.backends.python.backend import PythonModelInstance
from naiad.core.errors import ErrorCode, InferenceServerError
from naiad.core.request import InferRequest, InferResponse, RequestedOutput, Tensor


class _RemoteRequest(InferRequest):
    """A request whose ``cancelled`` flag lives in the server: reading it asks over the socket."""

    __slots__ = ("_conn", "_index")

    @property  # type: ignore[override]
    def cancelled(self) -> bool:
        self._conn.send(("is_cancelled", self._index))
        return bool(self._conn.recv())

    @cancelled.setter
    def cancelled(self, value: bool) -> None:
        """The dataclass constructor sets it; the server's copy is the one that counts."""


def _request(
    message: tuple[Any, ...], region: shm.Region | None, conn: Connection, index: int
) -> InferRequest:
    model_name, request_id, parameters, outputs, timeout_us, sequence_id, start, end, placements = message
    inputs = []
    for placement in placements:
        array = shm.view(region, placement)
        array.flags.writeable = False  # as in process: inputs are read-only views of the request
        inputs.append(Tensor(placement[0], placement[1], array))
    request = _RemoteRequest(
        model_name,
        id=request_id,
        inputs=inputs,
        outputs=None if outputs is None else [RequestedOutput(name) for name in outputs],
        parameters=parameters,
        timeout_us=timeout_us,
        sequence_id=sequence_id,
        sequence_start=start,
        sequence_end=end,
    )
    request._conn = conn
    request._index = index
    return request


class _Outputs:
    """The region this process writes outputs into, replaced by a larger one when needed."""

    def __init__(self) -> None:
        self.region: shm.Region | None = None

    def pack(self, results: list[Any]) -> tuple[Any, ...]:
        """``("results", path or None, size or None, results as the server reads them)``."""
        tensors = [
            (t.name, t.datatype, t.data)
            for result in results
            if isinstance(result, InferResponse)
            for t in result.outputs
        ]
        needed = shm.layout_size([array for _, _, array in tensors])
        fresh = None
        if needed and (self.region is None or needed > self.region.size):
            fresh = self.region = shm.Region.create(needed)
        placements = iter(shm.place(self.region, tensors))
        packed: list[tuple[Any, ...]] = []
        for result in results:
            if isinstance(result, InferResponse):
                mine = [next(placements) for _ in result.outputs]
                packed.append(("ok", result.parameters, mine))
            else:
                packed.append(("error", result.code.value, result.message))
        return ("results", fresh and fresh.path, fresh and fresh.size, packed)


def _serve(conn: Connection, instance: PythonModelInstance) -> None:
    inputs: shm.Region | None = None
    outputs = _Outputs()
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the server is gone: finalize and leave
            instance.close()
            return
        if message[0] == "close":
            instance.close()
            conn.send(("closed",))
            return
        _, path, size, requests = message
        try:
            if path is not None:
                inputs = shm.Region.attach(path, size)
            batch = [_request(request, inputs, conn, index) for index, request in enumerate(requests)]
            reply = outputs.pack(instance.execute(batch))
        except Exception as exc:  # a failure here must cost this batch, not the instance
            error = ("error", ErrorCode.INTERNAL.value, f"{type(exc).__name__}: {exc}")
            reply = ("results", None, None, [error] * len(requests))
        conn.send(reply)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(int(argv[1]))
    _, context, config_bytes, level = conn.recv()
    logging.basicConfig(
        level=level,
        format="%(levelname).1s%(asctime)s.%(msecs)03d %(process)d %(name)s] %(message)s",
        datefmt="%m%d %H:%M:%S",
        stream=sys.stderr,
    )
    config = mc.ModelConfig.FromString(config_bytes)
    try:
        instance = PythonModelInstance(dataclasses.replace(context, config=config))
    except InferenceServerError as exc:
        conn.send(("failed", exc.code.value, exc.message))
        return 1
    except Exception as exc:
        conn.send(("failed", ErrorCode.INTERNAL.value, f"{type(exc).__name__}: {exc}"))
        return 1
    conn.send(("loaded",))
    _serve(conn, instance)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
