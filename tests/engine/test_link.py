"""The engine's end of a worker's channel, driven in process: which requests the engine checks itself,
and where a framework model's outputs go."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from naiad.backends.runtime import Runtime
from naiad.core.request import InferRequest, RequestedOutput, Tensor
from naiad.dataplane import DataPlane
from naiad.engine.link import PublishedSignatures, WorkerLink
from naiad.ipc import arena, tensors
from naiad.ipc.arena import Arena
from naiad.ipc.channel import Channel
from naiad.ipc.messages import INLINE, RESPONSE_ARENA, Answer, Infer, ToEngine, ToWorker
from naiad.repository.manager import ModelRepository
from naiad.repository.registry import ModelRegistry
from onnx import TensorProto, helper

from tests.backends.onnxruntime.models import tensor_info
from tests.backends.onnxruntime.models import write_model as write_onnx_model
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


class _Engine:
    """A real engine (repository, data plane) serving one worker's link over real arenas; what the
    engine writes back is decoded as the worker decodes it (``transport.answers``)."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo

    async def __aenter__(self) -> _Engine:
        registry = ModelRegistry()
        self.models = ModelRepository([self.repo], registry=registry, runtime=Runtime())
        dataplane = DataPlane(registry, self.models)
        await self.models.start()
        dataplane.started = True
        requests_fd, responses_fd = arena.create("requests", SIZE), arena.create("responses", SIZE)
        self.worker_arena = Arena(requests_fd, SIZE, writable=True)
        self.responses = Arena(responses_fd, SIZE, writable=True)
        published = PublishedSignatures()
        published.update(1, registry.models())
        link = WorkerLink(
            0,
            dataplane,
            Arena(requests_fd, SIZE, writable=False),
            self.responses,
            _calls,
            lambda _: None,
            published,
        )
        self.transport = _Answers()
        self.channel: Channel[ToEngine] = Channel(ToEngine, link.on_message, link.on_lost)
        self.channel.connection_made(self.transport)  # type: ignore[arg-type]
        link.bind(self.channel)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.models.close()

    async def answer(self, request_id: int, request: InferRequest, validated: int = 0) -> Answer:
        """Send ``request`` as the worker would (vouched for under catalog ``validated``, 0: not) and
        wait for its answer."""
        message = tensors.request_message(request, self.worker_arena, [])
        message.validated = validated
        body = msgspec.msgpack.encode(Infer(request_id, message))
        self.channel.data_received(struct.pack("<I", len(body)) + body)
        while len(self.transport.answers) < request_id:
            await asyncio.sleep(0.001)
        return self.transport.answers[request_id - 1]


async def _answers(repo: Path, sends: list[tuple[int, int]]) -> list[Answer]:
    """Each ``(shape, validated)``: one request with an FP32 input of that many elements, vouched for
    by the worker under catalog ``validated`` (0: not), answered by a real engine whose last
    published catalog is 1."""
    async with _Engine(repo) as engine:
        for request_id, (elements, validated) in enumerate(sends, 1):
            data = np.arange(elements, dtype=np.float32)
            await engine.answer(
                request_id, InferRequest("fixed", inputs=[Tensor("INPUT0", "FP32", data)]), validated
            )
    return engine.transport.answers


def test_the_engine_checks_a_request_unless_the_worker_did_under_the_current_catalog(tmp_path: Path) -> None:
    write_model(tmp_path, "fixed", CONFIG, IDENTITY_PY)
    answers = asyncio.run(asyncio.wait_for(_answers(tmp_path, [(4, 1), (8, 0), (8, 7)]), 60))
    served, unchecked, stale = answers
    assert served.error is None and served.response is not None  # checked by the worker: not again
    for refused in (unchecked, stale):  # no check by the worker, or one under another catalog
        assert refused.error is not None and refused.done
        assert refused.error.code == "INVALID_ARG"
        assert "unexpected shape for input 'INPUT0' for model 'fixed'" in refused.error.message


ONNX_CONFIG = """
platform: "onnxruntime_onnx"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2048 ] } ]
output [
  { name: "DOUBLED" data_type: TYPE_FP32 dims: [ 2048 ] },
  { name: "NEGATED" data_type: TYPE_FP32 dims: [ 2048 ] }
]
"""


async def _onnx_answers(
    repo: Path, asked: list[list[RequestedOutput] | None]
) -> tuple[list[Answer], Arena, int]:
    """One request per entry of ``asked`` (the outputs it names) to the ONNX model ``big``, answered by
    a real engine; the answers, the response arena, and its blocks in use once all were answered."""
    async with _Engine(repo) as engine:
        for request_id, outputs in enumerate(asked, 1):
            data = np.arange(2048, dtype=np.float32) * request_id
            await engine.answer(
                request_id, InferRequest("big", inputs=[Tensor("INPUT0", "FP32", data)], outputs=outputs)
            )
        in_use = engine.responses.in_use
    return engine.transport.answers, engine.responses, in_use


def test_a_framework_models_outputs_go_to_the_response_arena_and_every_block_comes_back(
    tmp_path: Path,
) -> None:
    """ONNX Runtime's outputs are copied where the worker reads them by the instance's thread: the
    answers name those blocks, and a block placed for an output the answer does not carry (turned
    into class labels) is freed by the engine, so the arena holds exactly what the worker will
    release."""
    write_onnx_model(
        tmp_path,
        "big",
        [
            helper.make_node("Add", ["INPUT0", "INPUT0"], ["DOUBLED"]),
            helper.make_node("Neg", ["INPUT0"], ["NEGATED"]),
        ],
        [tensor_info("INPUT0", TensorProto.FLOAT, [2048])],
        [
            tensor_info("DOUBLED", TensorProto.FLOAT, [2048]),
            tensor_info("NEGATED", TensorProto.FLOAT, [2048]),
        ],
        ONNX_CONFIG,
    )
    asked: list[list[RequestedOutput] | None] = [
        None,
        [RequestedOutput("NEGATED")],
        [RequestedOutput("DOUBLED", {"classification": 2}), RequestedOutput("NEGATED")],
    ]
    answers, responses, in_use = asyncio.run(asyncio.wait_for(_onnx_answers(tmp_path, asked), 60))

    named = []
    for request_id, answer in enumerate(answers, 1):
        assert answer.error is None and answer.response is not None, answer.error
        source = np.arange(2048, dtype=np.float32) * request_id
        for ref in answer.response.outputs:
            if ref.datatype == "BYTES":  # the classification: the two largest, as "value:index"
                assert (ref.name, ref.arena) == ("DOUBLED", INLINE)
                continue
            assert ref.arena == RESPONSE_ARENA
            named.append(ref.offset)
            values = responses.array(ref.offset, ref.nbytes, np.float32)
            np.testing.assert_array_equal(values, source * 2 if ref.name == "DOUBLED" else -source)
    assert [[ref.name for ref in a.response.outputs] for a in answers if a.response is not None] == [
        ["DOUBLED", "NEGATED"],
        ["NEGATED"],
        ["DOUBLED", "NEGATED"],
    ]
    assert in_use == len(named) == 4  # nothing but the named blocks: the classified output's was freed
    for offset in named:  # the worker's Release
        responses.free(offset)
    assert responses.in_use == 0
