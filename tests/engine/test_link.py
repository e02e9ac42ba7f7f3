"""The engine's end of a worker's channel, driven in process: which requests the engine checks itself,
and where a framework model's and a model process's outputs go."""

from __future__ import annotations

import asyncio
import gc
import struct
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from naiad.backends.runtime import Runtime
from naiad.core.request import InferRequest, RequestedOutput, Tensor
from naiad.dataplane import DataPlane
from naiad.engine.link import PublishedSignatures, WorkerLink
from naiad.ipc import arena, tensors
from naiad.ipc.arena import Arena
from naiad.ipc.channel import Channel
from naiad.ipc.messages import (
    INLINE,
    REQUEST_ARENA,
    RESPONSE_ARENA,
    Answer,
    Cancel,
    Infer,
    ToEngine,
    ToWorker,
)
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
LASTING = 1 << 20


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
    engine writes back is decoded as the worker decodes it (``transport.answers``).  ``lend``: both
    arenas are lent to model processes as ``FrontendWorkers`` lends a worker's, the response arena
    with a part for reserved blocks (``LASTING`` bytes past ``SIZE``)."""

    def __init__(self, repo: Path, *, lend: bool = False) -> None:
        self.repo = repo
        self.lend = lend
        self.keys: tuple[int, ...] = ()

    async def __aenter__(self) -> _Engine:
        self.runtime = Runtime()
        registry = ModelRegistry()
        self.models = ModelRepository([self.repo], registry=registry, runtime=self.runtime)
        dataplane = DataPlane(registry, self.models)
        await self.models.start()
        dataplane.started = True
        lasting = LASTING if self.lend else 0
        requests_fd = arena.create("requests", SIZE)
        responses_fd = arena.create("responses", SIZE + lasting)
        self.worker_arena = Arena(requests_fd, SIZE, writable=True)
        requests = Arena(requests_fd, SIZE, writable=self.lend)
        self.responses = Arena(responses_fd, SIZE + lasting, writable=True, lasting=lasting)
        if self.lend:
            lent = self.runtime.arenas
            self.keys = (lent.add(requests, requests_fd), lent.add(self.responses, responses_fd, shared=True))
        published = PublishedSignatures()
        published.update(1, registry.models())
        link = WorkerLink(
            0,
            dataplane,
            requests,
            self.responses,
            _calls,
            lambda _: None,
            published,
            request_key=self.keys[0] if self.keys else 0,
            response_key=self.keys[1] if self.keys else 0,
        )
        self.transport = _Answers()
        self.channel: Channel[ToEngine] = Channel(ToEngine, link.on_message, link.on_lost)
        self.channel.connection_made(self.transport)  # type: ignore[arg-type]
        link.bind(self.channel)
        self.link = link
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.models.close()
        self.runtime.close()
        for key in self.keys:
            self.runtime.arenas.remove(key)

    def send(self, *messages: Infer | Cancel) -> None:
        """``messages`` as one read of the channel brings them."""
        frames = []
        for message in messages:
            body = msgspec.msgpack.encode(message)
            frames.append(struct.pack("<I", len(body)) + body)
        self.channel.data_received(b"".join(frames))

    async def answer(self, request_id: int, request: InferRequest, validated: int = 0) -> Answer:
        """Send ``request`` as the worker would (vouched for under catalog ``validated``, 0: not) and
        wait for its answer."""
        message = tensors.request_message(request, self.worker_arena, [])
        message.validated = validated
        self.send(Infer(request_id, message))
        return await self.answered(request_id)

    async def cancel_running(
        self, request_id: int, request: InferRequest, validated: int, after: float
    ) -> Answer:
        """Send ``request`` (vouched for under ``validated``), cancel it ``after`` seconds (its model
        is still running it by then) and wait for its answer."""
        message = tensors.request_message(request, self.worker_arena, [])
        message.validated = validated
        self.send(Infer(request_id, message))
        await asyncio.sleep(after)
        self.send(Cancel(request_id))
        return await self.answered(request_id)

    async def answered(self, count: int) -> Answer:
        """The ``count``-th answer, once the engine wrote it."""
        while len(self.transport.answers) < count:
            await asyncio.sleep(0.001)
        return self.transport.answers[count - 1]


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


#: 128 KiB: large enough for a model process to send its input back by reference (``shm.locate``).
ELEMENTS = 32768
SCALE_CONFIG = """
name: "scale"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 32768 ] } ]
output [
  { name: "DOUBLED" data_type: TYPE_FP32 dims: [ 32768 ] },
  { name: "SAME" data_type: TYPE_FP32 dims: [ 32768 ] },
  { name: "ANY" data_type: TYPE_FP32 dims: [ -1 ] }
]
"""
#: In its own model process (the default): a new array, its input returned as it is, an output of a
#: size the config leaves open, and as long a pause as the request's ``sleep`` parameter asks.
SCALE_PY = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            time.sleep(float(json.loads(request.parameters()).get("sleep", 0)))
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("DOUBLED", x * 2),
                pb_utils.Tensor("SAME", x),
                pb_utils.Tensor("ANY", np.concatenate([x, x])),
            ]))
        return responses
"""


def _scale(request_id: int, **parameters: Any) -> InferRequest:
    data = np.arange(ELEMENTS, dtype=np.float32) + (request_id - 1)
    return InferRequest("scale", inputs=[Tensor("INPUT0", "FP32", data)], parameters=parameters)


def test_a_model_process_writes_its_outputs_where_the_worker_reads_them(tmp_path: Path) -> None:
    """An output of a size the config fixes is written by the model process straight into a block the
    engine reserved in the worker's response arena, in its part for such blocks (held while the
    execution runs, named by the answer); an input returned as it is goes back by reference, and an
    output of open size is copied by the engine into the arena's ring for responses.  Every block is
    the worker's to release: none is left behind."""
    write_model(tmp_path, "scale", SCALE_CONFIG, SCALE_PY)

    async def scenario() -> tuple[list[Answer], dict[str, list[np.ndarray]], int, int]:
        async with _Engine(tmp_path, lend=True) as engine:
            message = tensors.request_message(_scale(1, sleep=0.5), engine.worker_arena, [])
            engine.send(Infer(1, message))
            await asyncio.sleep(0.3)
            during = engine.responses.in_use  # DOUBLED's and SAME's blocks, reserved while it runs
            await engine.answered(1)
            await engine.answer(2, _scale(2))  # SAME now known as an input: nothing reserved for it
            answers = engine.transport.answers
            values: dict[str, list[np.ndarray]] = {"DOUBLED": [], "SAME": [], "ANY": []}
            for ref in [r for a in answers if a.response is not None for r in a.response.outputs]:
                where = engine.responses if ref.arena == RESPONSE_ARENA else engine.worker_arena
                values[ref.name].append(np.array(where.array(ref.offset, ref.nbytes, np.float32)))
            in_use = engine.responses.in_use
            for ref in [r for a in answers if a.response is not None for r in a.response.outputs]:
                if ref.arena == RESPONSE_ARENA:  # the worker's Release
                    engine.responses.free(ref.offset)
            return answers, values, during, in_use - 4 + engine.responses.in_use

    answers, values, during, leftover = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert [a.error for a in answers] == [None, None]
    assert during == 2
    for answer in answers:
        assert answer.response is not None
        refs = {ref.name: ref for ref in answer.response.outputs}
        assert [ref.name for ref in answer.response.outputs] == ["DOUBLED", "SAME", "ANY"]
        assert refs["DOUBLED"].arena == RESPONSE_ARENA and refs["DOUBLED"].offset >= SIZE  # reserved
        assert refs["SAME"].arena == REQUEST_ARENA  # the input itself: by reference
        assert refs["ANY"].arena == RESPONSE_ARENA and refs["ANY"].offset < SIZE  # copied by the engine
    for index, request_id in enumerate((1, 2)):
        x = np.arange(ELEMENTS, dtype=np.float32) + (request_id - 1)
        np.testing.assert_array_equal(values["DOUBLED"][index], x * 2)
        np.testing.assert_array_equal(values["SAME"][index], x)
        np.testing.assert_array_equal(values["ANY"][index], np.concatenate([x, x]))
    assert leftover == 0


def test_a_block_reserved_for_a_running_execution_outlives_the_requests_answer(tmp_path: Path) -> None:
    """The worker's client goes away while the model process runs: the request is answered at once,
    but the blocks reserved for its outputs stay reserved until the execution ends (the process may
    still write them), and are freed then."""
    write_model(tmp_path, "scale", SCALE_CONFIG, SCALE_PY)

    async def scenario() -> tuple[Answer, int, int]:
        async with _Engine(tmp_path, lend=True) as engine:
            engine.send(Infer(1, tensors.request_message(_scale(1, sleep=1.0), engine.worker_arena, [])))
            await asyncio.sleep(0.3)
            engine.send(Cancel(1))
            answer = await engine.answered(1)
            held = engine.responses.in_use
            for _ in range(300):  # until the execution ended
                if engine.responses.in_use == 0:
                    break
                await asyncio.sleep(0.01)
            return answer, held, engine.responses.in_use

    answer, held, after = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert answer.error is not None and answer.error.code == "CANCELLED"
    assert held == 2  # answered, the model process still running: DOUBLED's and SAME's blocks held
    assert after == 0


def test_a_cancel_reaches_a_waiting_request_at_once_and_the_others_are_answered(tmp_path: Path) -> None:
    """Requests that wait (here for a model process) are carried on without a task each: a ``Cancel``
    read with its ``Infer`` answers CANCELLED at once, while the request before it runs on, and a
    request after it is answered; none is left in flight."""
    write_model(tmp_path, "scale", SCALE_CONFIG, SCALE_PY)

    async def scenario() -> tuple[list[Answer], int]:
        async with _Engine(tmp_path, lend=True) as engine:
            slow = tensors.request_message(_scale(1, sleep=0.5), engine.worker_arena, [])
            quick = tensors.request_message(_scale(2), engine.worker_arena, [])
            engine.send(Infer(1, slow), Infer(2, quick), Cancel(2))
            first = await engine.answered(1)
            await engine.answered(2)
            await engine.answer(3, _scale(3))
            return [first, *engine.transport.answers[1:]], engine.link.inflight

    answers, inflight = asyncio.run(asyncio.wait_for(scenario(), 60))
    cancelled, slow, after = answers
    assert cancelled.id == 2 and cancelled.error is not None and cancelled.error.code == "CANCELLED"
    for answer, request_id in ((slow, 1), (after, 3)):
        assert answer.id == request_id and answer.error is None and answer.response is not None
        assert [output.name for output in answer.response.outputs] == ["DOUBLED", "SAME", "ANY"]
    assert inflight == 0


def _counts(statistics: dict[str, Any]) -> dict[str, Any]:
    """The counts of one version's statistics (Triton's document), without its durations."""
    (stats,) = statistics["model_stats"]
    inference = stats["inference_stats"]
    return {
        "inference_count": stats["inference_count"],
        "execution_count": stats["execution_count"],
        **{key: inference[key]["count"] for key in ("success", "fail", "queue", "compute_infer")},
        "batch_stats": [
            (batch["batch_size"], batch["compute_infer"]["count"]) for batch in stats["batch_stats"]
        ],
    }


@pytest.mark.parametrize("validated", [0, 1], ids=["through-the-coroutine", "at-once"])
def test_requests_to_a_model_process_are_answered_and_counted_alike_on_either_path(
    tmp_path: Path, validated: int
) -> None:
    """A request the worker checked under the current catalog, to a model whose scheduler starts
    requests at once (here: a model process, no batching), is started without a coroutine
    (``DataPlane.answer_at_once``); one it did not check goes through ``DataPlane.infer``.  Either
    way: the same answers (outputs, names, the model's error), the same statistics, a client gone
    while its request runs answered CANCELLED at once and counted as a failure once the execution
    ends, and every worker's block back."""
    write_model(tmp_path, "scale", SCALE_CONFIG, SCALE_PY)

    async def scenario() -> tuple[list[Answer], dict[str, Any], int, int]:
        async with _Engine(tmp_path, lend=True) as engine:
            for request_id in (1, 2):
                await engine.answer(request_id, _scale(request_id), validated)
            asked = _scale(3)
            asked.outputs = [RequestedOutput("SAME")]
            await engine.answer(3, asked, validated)
            failing = _scale(4, sleep="not a number")  # the model raises: its error
            await engine.answer(4, failing, validated)
            await engine.cancel_running(5, _scale(5, sleep=0.5), validated, after=0.2)
            inflight = engine.link.inflight
            for _ in range(1000):  # until the cancelled request's execution ended and was counted
                counts = _counts(await engine.link.dataplane.model_statistics("scale"))
                if counts["fail"] == 2:
                    break
                await asyncio.sleep(0.01)
            answers = engine.transport.answers
            for ref in [r for a in answers if a.response is not None for r in a.response.outputs]:
                if ref.arena == RESPONSE_ARENA:  # the worker's Release
                    engine.responses.free(ref.offset)
            return answers, counts, inflight, engine.responses.in_use

    answers, counts, inflight, in_use = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert [answer.id for answer in answers] == [1, 2, 3, 4, 5]
    for answer in answers[:3]:
        assert answer.error is None and answer.response is not None and answer.done
        assert (answer.response.model_name, answer.response.model_version) == ("scale", "1")
    assert [[ref.name for ref in a.response.outputs] for a in answers[:3] if a.response is not None] == [
        ["DOUBLED", "SAME", "ANY"],
        ["DOUBLED", "SAME", "ANY"],
        ["SAME"],
    ]
    failed, cancelled = answers[3].error, answers[4].error
    assert (
        failed is not None
        and failed.code == "INTERNAL"
        and "could not convert string to float" in failed.message
    )
    assert cancelled is not None and cancelled.code == "CANCELLED" and answers[4].done
    assert counts == {
        "inference_count": 3,
        "execution_count": 5,
        "success": 3,
        "fail": 2,
        "queue": 3,
        "compute_infer": 3,
        "batch_stats": [(1, 5)],
    }
    assert inflight == 0 and in_use == 0


@pytest.mark.parametrize("validated", [0, 1], ids=["through-the-coroutine", "at-once"])
def test_what_a_request_makes_is_freed_with_it_not_left_to_the_collector(
    tmp_path: Path, validated: int
) -> None:
    """Answered, failed or cancelled, on either path, a request leaves no reference cycle behind:
    what the engine made for it (the request, its tensors, its waiter, its output placer) is freed
    by reference counting when it is answered.  A cycle per request (the at-once waiter and its
    reply once held each other) left tens of thousands of objects a second to the collector, whose
    passes over them took a tenth of the engine's CPU with model processes (``benchmarks/scaling``)."""
    write_model(tmp_path, "scale", SCALE_CONFIG, SCALE_PY)
    made = ("InferRequest", "Tensor", "LentTensor", "AtOnce", "_AtOnceRequest", "OutputPlacer", "_Steps")

    async def scenario() -> list[str]:
        async with _Engine(tmp_path, lend=True) as engine:
            await engine.answer(1, _scale(1), validated)  # (the first request's one-time objects)
            gc.collect()
            gc.disable()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                for request_id in (2, 3):
                    await engine.answer(request_id, _scale(request_id), validated)
                await engine.answer(4, _scale(4, sleep="not a number"), validated)  # the model raises
                await engine.cancel_running(5, _scale(5, sleep=0.3), validated, after=0.1)
                while engine.runtime.in_flight() or engine.link.inflight:
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.5)  # (the cancelled execution ends)
                gc.collect()
                return [type(thing).__name__ for thing in gc.garbage if type(thing).__name__ in made]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
                gc.enable()

    left = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert left == []


@pytest.mark.parametrize("validated", [0, 1], ids=["through-the-coroutine", "at-once"])
def test_requests_running_when_their_worker_is_lost_are_cancelled_and_counted(
    tmp_path: Path, validated: int
) -> None:
    """The worker ends while two of its requests run in a model process (one executing, one sent
    behind it): both are cancelled at once on either path, nothing stays in flight in the link or
    the data plane, and each counts as a cancelled failure once its execution ends; the model then
    serves the next worker's request."""
    write_model(tmp_path, "scale", SCALE_CONFIG, SCALE_PY)

    async def scenario() -> tuple[list[Answer], int, int, dict[str, Any], Answer]:
        async with _Engine(tmp_path, lend=True) as engine:
            for request_id in (1, 2):
                slow = tensors.request_message(_scale(request_id, sleep=0.3), engine.worker_arena, [])
                slow.validated = validated
                engine.send(Infer(request_id, slow))
            await asyncio.sleep(0.1)
            engine.link.on_lost()
            await asyncio.sleep(0.05)  # (answers are written at the end of a loop iteration)
            lost = list(engine.transport.answers)
            inflight = engine.link.inflight
            dataplane = engine.link.dataplane
            for _ in range(1000):  # until both executions ended and were counted
                counts = _counts(await dataplane.model_statistics("scale"))
                if counts["fail"] == 2:
                    break
                await asyncio.sleep(0.01)
            after = await engine.answer(3, _scale(3), validated)
            return lost, inflight, dataplane.in_flight(), counts, after

    lost, inflight, in_flight, counts, after = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert sorted(answer.id for answer in lost) == [1, 2]
    for answer in lost:
        assert answer.error is not None and answer.error.code == "CANCELLED" and answer.done
    assert inflight == 0 and in_flight == 0
    assert (counts["success"], counts["fail"], counts["execution_count"]) == (0, 2, 2)
    assert after.error is None and after.response is not None
