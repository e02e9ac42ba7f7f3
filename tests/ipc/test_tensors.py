"""Outputs a backend places where its response goes (:class:`naiad.ipc.tensors.OutputPlacer`).

A frontend worker reads a response's tensors from its response arena; a backend computing on a thread
of its own copies its outputs there itself, and the response then names those blocks.  What matters
is that nothing is copied twice, that every block ends up either named by the response (the worker
frees it) or freed by the engine, and that a block is never freed while it is being written.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
from naiad.core.request import InferRequest, InferResponse, Tensor
from naiad.ipc import arena, tensors
from naiad.ipc.arena import Arena, LentTensor, lent_at
from naiad.ipc.messages import INLINE, REQUEST_ARENA, RESPONSE_ARENA

SIZE = 1 << 20


@pytest.fixture
def arenas() -> Iterator[tuple[Arena, Arena]]:
    """(the request arena as the engine maps it, the response arena the engine writes)."""
    requests = Arena(arena.create("requests", SIZE), SIZE, writable=True)
    responses = Arena(arena.create("responses", SIZE), SIZE, writable=True)
    yield requests, responses
    requests.close()
    responses.close()


def response(*outputs: Tensor) -> InferResponse:
    return InferResponse("model", "1", "request-1", list(outputs))


def test_a_placed_output_is_named_by_the_response_and_not_copied_again(arenas: tuple[Arena, Arena]) -> None:
    requests, responses = arenas
    placer = tensors.OutputPlacer(responses, threading.Lock())
    computed = np.arange(2048, dtype=np.float32).reshape(2, 1024)
    placed = placer.place("FP32", computed)
    assert placed is not None and placed.shape == (2, 1024)
    assert responses.contains(placed) is not None
    np.testing.assert_array_equal(placed, computed)
    assert responses.in_use == 1

    message = tensors.response_message(
        response(Tensor("OUTPUT0", "FP32", placed)), requests, responses, placer
    )
    placer.close()
    [ref] = message.outputs
    assert (ref.arena, ref.offset, ref.nbytes, ref.shape) == (
        RESPONSE_ARENA,
        responses.contains(placed),
        8192,
        [2, 1024],
    )
    assert responses.in_use == 1  # the block placed, named as it is: no second block, no copy
    np.testing.assert_array_equal(
        responses.array(ref.offset, ref.nbytes, np.float32).reshape(2, 1024), computed
    )
    responses.free(ref.offset)  # the worker's Release
    assert responses.in_use == 0


def test_what_was_placed_and_not_named_is_freed_once_the_request_is_answered(
    arenas: tuple[Arena, Arena],
) -> None:
    requests, responses = arenas
    placer = tensors.OutputPlacer(responses, threading.Lock())
    kept = placer.place("FP32", np.ones(4096, dtype=np.float32))
    dropped = placer.place("FP32", np.zeros(4096, dtype=np.float32))  # e.g. turned into class labels
    assert kept is not None and dropped is not None and responses.in_use == 2

    labels = Tensor("OUTPUT1", "BYTES", np.array([b"0.0:0"], dtype=np.object_))
    message = tensors.response_message(
        response(Tensor("OUTPUT0", "FP32", kept), labels), requests, responses, placer
    )
    placer.close()
    assert [ref.arena for ref in message.outputs] == [RESPONSE_ARENA, INLINE]
    assert responses.in_use == 1  # the named one, until the worker releases it
    assert placer.place("FP32", np.ones(4096, dtype=np.float32)) is None  # answered: nothing more
    assert responses.in_use == 1


def test_a_failed_request_leaves_nothing_behind(arenas: tuple[Arena, Arena]) -> None:
    _, responses = arenas
    placer = tensors.OutputPlacer(responses, threading.Lock())
    assert placer.place("INT64", np.arange(10_000, dtype=np.int64)) is not None
    placer.close()  # answered with an error: no response names the block
    assert responses.in_use == 0


def test_small_bytes_and_mistyped_outputs_stay_where_they_are(arenas: tuple[Arena, Arena]) -> None:
    requests, responses = arenas
    placer = tensors.OutputPlacer(responses, threading.Lock())
    assert placer.place("FP32", np.ones(1024, dtype=np.float32)) is None  # 4 KiB: inside the message
    assert placer.place("BYTES", np.array([b"x" * 8192], dtype=np.object_)) is None
    assert placer.place("FP32", np.ones(4096, dtype=np.float64)) is None  # not the wire's dtype
    assert responses.in_use == 0

    # an output already in the request arena (a view of an input) is named there, not placed
    offset = requests.allocate(16384)
    assert offset is not None
    view = requests.array(offset, 16384, np.float32)
    message = tensors.response_message(response(Tensor("OUTPUT0", "FP32", view)), requests, responses, placer)
    assert [(ref.arena, ref.offset) for ref in message.outputs] == [(REQUEST_ARENA, offset)]
    placer.close()
    assert responses.in_use == 0


def test_no_room_in_the_arena_leaves_the_output_to_the_engine(arenas: tuple[Arena, Arena]) -> None:
    requests, responses = arenas
    placer = tensors.OutputPlacer(responses, threading.Lock())
    too_large = np.zeros(SIZE // 4 + 1, dtype=np.float32)
    assert placer.place("FP32", too_large) is None
    message = tensors.response_message(
        response(Tensor("OUTPUT0", "FP32", too_large)), requests, responses, placer
    )
    placer.close()
    assert message.outputs[0].arena == INLINE  # as before: larger than the arena goes inline
    assert responses.in_use == 0


def test_answering_while_a_thread_places_never_leaks_a_block(arenas: tuple[Arena, Arena]) -> None:
    """The engine answers (a timeout, a cancellation) while the backend's thread is still copying:
    whichever comes first, the block is freed exactly once and no placement outlives the answer."""
    _, responses = arenas
    computed = np.arange(SIZE // 8, dtype=np.float32)  # 512 KiB: a copy long enough to overlap
    outcomes = {"placed": 0, "refused": 0}
    for _ in range(200):
        placer = tensors.OutputPlacer(responses, threading.Lock())
        start = threading.Barrier(2)
        results: list[np.ndarray | None] = []

        def backend(
            placer: tensors.OutputPlacer = placer,
            start: threading.Barrier = start,
            results: list[np.ndarray | None] = results,
        ) -> None:
            start.wait()
            results.append(placer.place("FP32", computed))

        thread = threading.Thread(target=backend)
        thread.start()
        start.wait()
        placer.close()
        thread.join()
        outcomes["placed" if results[0] is not None else "refused"] += 1
        assert responses.in_use == 0
    assert sum(outcomes.values()) == 200


def test_what_the_engine_keeps_past_a_request_is_copied_out_of_the_arenas(
    arenas: tuple[Arena, Arena],
) -> None:
    """A sequence's implicit state outlives its request: an output placed for the response, or an input
    (even a slice of one) lying where the worker wrote the request, is copied; anything else is kept."""
    requests, responses = arenas
    placer = tensors.OutputPlacer(responses, threading.Lock(), requests=requests)
    placed = placer.place("INT32", np.arange(4096, dtype=np.int32))
    assert placed is not None
    offset = requests.allocate(16384)
    assert offset is not None
    requests.write(offset, np.full(4096, 7, dtype=np.int32))
    given = requests.array(offset, 16384, np.int32).reshape(64, 64)
    elsewhere = np.ones(4096, dtype=np.int32)
    for lent in (placed, given, given[1:3, ::2], given[::-1]):
        kept = placer.kept(lent)
        assert kept is not lent and not responses.holds(kept) and not requests.holds(kept)
        np.testing.assert_array_equal(kept, lent)
    assert placer.kept(elsewhere) is elsewhere
    assert not requests.holds(np.empty(0, dtype=np.int32))
    placer.close()


def test_a_lent_input_returned_is_named_where_it_lies_and_a_replaced_one_is_looked_for(
    arenas: tuple[Arena, Arena],
) -> None:
    """A frontend worker's large input, made knowing where it lies in the lent request arena
    (:class:`~naiad.ipc.arena.LentTensor`), comes back by that place; one whose data was replaced, or
    that lies in another worker's arena, is not taken at its word: looked for by its address, or
    copied, as any output."""
    requests, responses = arenas
    worker = Arena(arena.create("other", SIZE), SIZE, writable=True)
    try:
        offset = requests.allocate(16384)
        assert offset is not None
        requests.array(offset, 16384, np.float32)[:] = np.arange(4096, dtype=np.float32)
        message = tensors.request_message(
            InferRequest("m", inputs=[Tensor("X", "FP32", np.arange(4096, dtype=np.float32))]), requests, []
        )
        [ref] = message.inputs
        request = tensors.request_from(message, requests, key=7)
        [lent] = request.inputs
        assert isinstance(lent, LentTensor) and lent_at(lent) == (7, ref.offset)
        assert lent_at(Tensor("X", "FP32", lent.data)) is None  # a plain tensor: looked for

        placer = tensors.OutputPlacer(responses, threading.Lock(), key=8)
        named = tensors.response_message(response(lent), requests, responses, placer, request_key=7)
        assert [(r.arena, r.offset) for r in named.outputs] == [(REQUEST_ARENA, ref.offset)]

        copied = np.arange(4096, dtype=np.float32) * 3
        lent.data = copied  # replaced: its place no longer says where its data is
        assert lent_at(lent) is None
        moved = tensors.response_message(response(lent), requests, responses, placer, request_key=7)
        [out] = moved.outputs
        assert out.arena == RESPONSE_ARENA  # copied, not named at the input's place
        np.testing.assert_array_equal(responses.array(out.offset, out.nbytes, np.float32), copied)
        responses.free(out.offset)

        elsewhere = worker.allocate(16384)
        assert elsewhere is not None
        data = worker.array(elsewhere, 16384, np.float32)
        data[:] = 5.0
        foreign = LentTensor("Y", "FP32", data, {}, (data, 9, elsewhere))  # another worker's arena
        sent = tensors.response_message(response(foreign), requests, responses, placer, request_key=7)
        [out] = sent.outputs
        assert out.arena == RESPONSE_ARENA
        np.testing.assert_array_equal(responses.array(out.offset, out.nbytes, np.float32), data)
        placer.close()
    finally:
        worker.close()


def test_a_placed_output_is_named_whether_the_backend_answers_with_it_or_a_view_of_it(
    arenas: tuple[Arena, Arena],
) -> None:
    """The array :meth:`OutputPlacer.place` made is known as itself; a backend that answers with a
    view of it (reshaped) is still named by its block, looked for by its address."""
    requests, responses = arenas
    placer = tensors.OutputPlacer(responses, threading.Lock())
    first = placer.place("FP32", np.full((4, 1024), 1.0, dtype=np.float32))
    second = placer.place("FP32", np.full((4, 1024), 2.0, dtype=np.float32))
    assert first is not None and second is not None and responses.in_use == 2
    message = tensors.response_message(
        response(Tensor("A", "FP32", first), Tensor("B", "FP32", second.reshape(2, 2048))),
        requests,
        responses,
        placer,
    )
    placer.close()
    assert [r.arena for r in message.outputs] == [RESPONSE_ARENA, RESPONSE_ARENA]
    assert responses.in_use == 2  # both named as they are: nothing copied, nothing freed
    a, b = message.outputs
    assert b.shape == [2, 2048]
    np.testing.assert_array_equal(responses.array(a.offset, a.nbytes, np.float32), 1.0)
    np.testing.assert_array_equal(responses.array(b.offset, b.nbytes, np.float32), 2.0)
    assert {a.offset, b.offset} == {responses.contains(first), responses.contains(second)}
