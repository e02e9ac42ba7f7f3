"""The engine's end of a worker's channel, driven in process: which requests the engine checks itself."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from naiad.backends.runtime import Runtime
from naiad.core.request import InferRequest, Tensor
from naiad.dataplane import DataPlane
from naiad.engine.link import PublishedSignatures, WorkerLink
from naiad.ipc import arena, tensors
from naiad.ipc.arena import Arena
from naiad.ipc.channel import Channel
from naiad.ipc.messages import Answer, Infer, ToEngine, ToWorker
from naiad.repository.manager import ModelRepository
from naiad.repository.registry import ModelRegistry

from tests.support.models import IDENTITY_PY, write_model

CONFIG = """
name: "fixed"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }
"""
SIZE = 1 << 20


class _Answers:
    """The engine's transport: every answer it writes, decoded as the worker decodes it."""

    def __init__(self) -> None:
        self.answers: list[Answer] = []
        self._decoder = msgspec.msgpack.Decoder(ToWorker)

    def write(self, data: bytes) -> None:
        while data:
            (length,) = struct.unpack_from("<I", data)
            message = self._decoder.decode(data[4 : 4 + length])
            assert isinstance(message, Answer)
            self.answers.append(message)
            data = data[4 + length :]

    def close(self) -> None:
        pass


async def _calls(method: str, args: list[msgspec.Raw]) -> Any:
    raise AssertionError(f"no control call expected, got {method}")


async def _answers(repo: Path, sends: list[tuple[int, int]]) -> list[Answer]:
    """Each ``(shape, validated)``: one request with an FP32 input of that many elements, vouched for
    by the worker under catalog ``validated`` (0: not), answered by a real engine whose last
    published catalog is 1."""
    registry = ModelRegistry()
    models = ModelRepository([repo], registry=registry, runtime=Runtime())
    dataplane = DataPlane(registry, models)
    await models.start()
    dataplane.started = True
    requests_fd, responses_fd = arena.create("requests", SIZE), arena.create("responses", SIZE)
    worker_arena = Arena(requests_fd, SIZE, writable=True)
    published = PublishedSignatures()
    published.update(1, registry.models())
    link = WorkerLink(
        0,
        dataplane,
        Arena(requests_fd, SIZE, writable=False),
        Arena(responses_fd, SIZE, writable=True),
        _calls,
        lambda _: None,
        published,
    )
    transport = _Answers()
    channel: Channel[ToEngine] = Channel(ToEngine, link.on_message, link.on_lost)
    channel.connection_made(transport)  # type: ignore[arg-type]
    link.bind(channel)
    try:
        for request_id, (elements, validated) in enumerate(sends, 1):
            data = np.arange(elements, dtype=np.float32)
            message = tensors.request_message(
                InferRequest("fixed", inputs=[Tensor("INPUT0", "FP32", data)]), worker_arena, []
            )
            message.validated = validated
            body = msgspec.msgpack.encode(Infer(request_id, message))
            channel.data_received(struct.pack("<I", len(body)) + body)
            while len(transport.answers) < request_id:
                await asyncio.sleep(0.001)
    finally:
        await models.close()
    return transport.answers


def test_the_engine_checks_a_request_unless_the_worker_did_under_the_current_catalog(tmp_path: Path) -> None:
    write_model(tmp_path, "fixed", CONFIG, IDENTITY_PY)
    answers = asyncio.run(asyncio.wait_for(_answers(tmp_path, [(4, 1), (8, 0), (8, 7)]), 60))
    served, unchecked, stale = answers
    assert served.error is None and served.response is not None  # checked by the worker: not again
    for refused in (unchecked, stale):  # no check by the worker, or one under another catalog
        assert refused.error is not None and refused.done
        assert refused.error.code == "INVALID_ARG"
        assert "unexpected shape for input 'INPUT0' for model 'fixed'" in refused.error.message
