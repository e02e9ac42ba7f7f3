"""Triton's generate extension: ``POST /v2/models/{m}/generate`` and ``/generate_stream``.

Beyond Triton's HTTP inference endpoint, which refuses decoupled models, ``generate_stream`` relays
every response of a request as a Server-Sent Event (``data: {...}``, one per response, errors as
``data: {"error": ...}``) as soon as the model sends it, so a decoupled model's stream can be read over
plain HTTP.  ``generate`` answers with the one response of the request as a JSON object.  The request
and response objects are the extension's flat JSON (:mod:`naiad.codecs.generate`).

A request that fails before the model answers gets an ordinary JSON error with its status; once events
flow the status is 200 (the error's own when the first answer is the model's error response), so later
errors are events.  A client that disconnects mid-stream cancels the
request (the model's ``is_cancelled()`` turns true).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import orjson

from naiad.codecs.generate import decode_generate, encode_generate
from naiad.core.errors import ErrorResponse, InferenceServerError, InvalidArgumentError
from naiad.dataplane import DataPlane, EmptyFinal, StreamItem
from naiad.frontends.http.asgi import Receive
from naiad.frontends.http.errors import status_of

SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


async def generate(dataplane: DataPlane, body: bytes, name: str, version: str, max_input_size: int) -> bytes:
    """The generate response object of the request's one response."""
    if dataplane.loads_on_demand:
        await dataplane.admit(name)
    request = decode_generate(body, dataplane.signature(name, version), name, version, max_input_size)
    responses = []
    async for answer, _ in dataplane.stream(request):
        if isinstance(answer, InferenceServerError):
            raise answer
        if not isinstance(answer, EmptyFinal):
            responses.append(answer)
    if len(responses) != 1:
        raise InvalidArgumentError(
            "generate expects model to produce exactly 1 response, use generate stream for model that "
            f"generates various number of responses (model '{name}' produced {len(responses)})"
        )
    return encode_generate(responses[0])


async def generate_stream(
    dataplane: DataPlane, body: bytes, name: str, version: str, receive: Receive, max_input_size: int
) -> tuple[int, AsyncGenerator[bytes, None]]:
    """The status and the SSE body, once the model's first answer is known.  A request that fails
    before the model answers raises (a JSON error); one whose first answer is the model's error
    response gets that error as its first event, with the error's status, as Triton sends it."""
    if dataplane.loads_on_demand:
        await dataplane.admit(name)
    request = decode_generate(body, dataplane.signature(name, version), name, version, max_input_size)
    answers = dataplane.stream(request)
    first = await anext(answers)
    if isinstance(first[0], ErrorResponse):
        return status_of(first[0]), _events(first, answers, receive)
    if isinstance(first[0], InferenceServerError):
        await answers.aclose()
        raise first[0]
    return 200, _events(first, answers, receive)


def _event(answer: StreamItem) -> bytes:
    response = answer[0]
    if isinstance(response, InferenceServerError):
        return b"data: " + orjson.dumps({"error": response.message}) + b"\n\n"
    try:
        return b"data: " + encode_generate(response) + b"\n\n"
    except InferenceServerError as exc:
        return b"data: " + orjson.dumps({"error": exc.message}) + b"\n\n"


async def _events(
    first: StreamItem, answers: AsyncGenerator[StreamItem, None], receive: Receive
) -> AsyncGenerator[bytes, None]:
    disconnected = asyncio.ensure_future(_disconnect(receive))
    try:
        item = first
        while True:
            if not isinstance(item[0], EmptyFinal):
                yield _event(item)
            if item[1]:
                return
            following = asyncio.ensure_future(anext(answers))
            done, _ = await asyncio.wait({following, disconnected}, return_when=asyncio.FIRST_COMPLETED)
            if following not in done:
                following.cancel()
                return
            try:
                item = following.result()
            except StopAsyncIteration:
                return
            except InferenceServerError as exc:
                yield _event((exc, True))
                return
    finally:
        disconnected.cancel()
        await answers.aclose()


async def _disconnect(receive: Receive) -> None:
    """Return once the client has gone (the body was read, so ``receive`` only reports that)."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return
