"""A decoupled execution's answers, read in order on the event loop.

A decoupled model answers from its own threads, through the request's ``responses`` sink: zero or more
times, then once with the final flag, and the execution that started it may end before or after its
last answer.  Two readers on the event loop need those answers as one ordered stream: the data plane,
which streams them to a client, and an ensemble, which passes a decoupled step's answers on to the
steps after it.  :func:`answers` is that stream for both.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable

from naiad.core.errors import InferenceServerError
from naiad.core.request import InferRequest, InferResponse

#: What a decoupled model sends: a response, an error, or neither (the final flag on its own).
Answer = InferResponse | InferenceServerError | None


async def answers(
    request: InferRequest, run: Callable[[InferRequest], Awaitable[object]]
) -> AsyncGenerator[tuple[Answer, bool], None]:
    """Run ``run(request)`` with a sink in ``request.responses``; yield each ``(answer, final)`` the
    model sends, in order, until the final one.

    An execution that fails with a server error ends the stream with that error as its final answer
    (after the answers sent before it); any other exception is raised.  Closing the stream early (use
    ``contextlib.aclosing``) marks the request cancelled, so the model may stop sending, and cancels
    an execution still running.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[Answer, bool] | None] = asyncio.Queue()

    def sink(answer: Answer, final: bool) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, (answer, final))
        except RuntimeError:  # the loop is closed: the server is gone and nobody reads any more
            pass

    request.responses = sink
    execution = asyncio.ensure_future(run(request))
    execution.add_done_callback(lambda _: queue.put_nowait(None))
    finished = False
    try:
        while True:
            item = await queue.get()
            if item is None:  # the execution is over; answers may still come from model threads
                error = None if execution.cancelled() else execution.exception()
                if isinstance(error, InferenceServerError):
                    yield error, True
                    return
                if error is not None:
                    raise error
                continue
            finished = item[1]
            yield item
            if finished:
                return
    finally:
        if not finished:  # left early: the model may stop sending, and a running execution stops
            request.cancelled = True
            if not execution.done():
                execution.cancel()
        elif not execution.done():
            # The final answer often comes before the execution that started it returns (a model
            # answering from its own threads): it ends as it would have, counted as a success, not
            # cancelled; nobody waits for it (a failure is counted by its scheduler).
            execution.add_done_callback(_retrieve)


def _retrieve(execution: asyncio.Future[object]) -> None:
    if not execution.cancelled():
        execution.exception()
