"""The OpenAI-compatible frontend, as a plain ASGI application on its own port (``--openai-port``).

``GET /v1/models`` (and ``/v1/models/{id}``) lists the ready text-generation models;
``POST /v1/completions`` and ``POST /v1/chat/completions`` run one, whole or streamed as Server-Sent
Events; ``GET /health/ready`` is the server's readiness, as Triton's OpenAI frontend has it.  Requests
go through the same :class:`~naiad.dataplane.DataPlane` as KServe v2 HTTP and gRPC, so they count in the
same statistics and metrics, and the ``--http-restricted-api`` rules and ``--auth-key-file`` keys apply
here too (completions are the ``inference`` API and need the ``infer`` scope; listing models is
``model-repository`` and needs ``read``).  The OpenAI mapping itself is :mod:`naiad.codecs.openai`.

A client that disconnects cancels its request, streamed or not: the model's ``is_cancelled()`` turns
true and the generation stops at its next token.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing

import orjson

from naiad.codecs.openai import (
    DONE,
    Encoder,
    Generation,
    OpenAIError,
    Usage,
    check_signature,
    decode_chat,
    decode_completion,
    finish_reason,
    infer_request,
    is_generator,
    model_document,
    model_not_found,
    models_list,
    read_response,
)
from naiad.core.errors import InferenceServerError
from naiad.dataplane import DataPlane, EmptyFinal, StreamItem
from naiad.frontends.access.groups import Api, Need, Scope
from naiad.frontends.access.policy import AccessPolicy, Refusal
from naiad.frontends.http.asgi import Message, Receive, Send
from naiad.frontends.http.asgi import Scope as AsgiScope
from naiad.frontends.http.body import read_body
from naiad.frontends.openai.chat import ChatTemplates, tokenizer_folder

log = logging.getLogger("naiad.openai")

_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]

#: A handler's answer: status, body (bytes, or chunks to stream, each with whether more follow) and headers.
_Stream = AsyncGenerator[tuple[bytes, bool], None]
_Reply = tuple[int, bytes | _Stream, list[tuple[bytes, bytes]]]


class OpenAIFrontend:
    """ASGI app: ``OpenAIFrontend(dataplane, max_input_size=..., access=...)``."""

    def __init__(
        self,
        dataplane: DataPlane,
        *,
        max_input_size: int = 64 * 1024 * 1024,
        access: AccessPolicy | None = None,
    ) -> None:
        self.dataplane = dataplane
        self.max_input_size = max_input_size
        self.access = access if access is not None and access.active else None
        self.templates = ChatTemplates()
        self.created = int(time.time())

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method: str = scope["method"]
        path: str = scope["path"].rstrip("/") or "/"
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        watch: _DisconnectWatch | None = None
        try:
            try:
                refused = self._refusal(method, path, headers)
                if refused is not None:
                    raise refused
                body = b""
                if method == "POST":
                    length = headers.get("content-length")
                    declared = int(length) if length is not None and length.isdigit() else None
                    body = await read_body(receive, declared, self.max_input_size)
                    watch = _DisconnectWatch(receive)
                status, content, extra = await self._route(method, path, body)
            except OpenAIError as exc:
                status, content, extra = exc.status, exc.body(), exc.headers()
            except InferenceServerError as exc:
                error = OpenAIError.of(exc)
                status, content, extra = error.status, error.body(), error.headers()
            except Exception as exc:  # a bug must cost one request, never the server
                log.exception("unhandled error serving %s %s", method, path)
                error = OpenAIError(500, f"internal error: {type(exc).__name__}: {exc}", "server_error")
                status, content, extra = error.status, error.body(), error.headers()
            await _send(send, status, content, extra)
        except asyncio.CancelledError:
            if watch is None or not watch.gone():
                raise
            # the client has gone: its request is cancelled, and nobody is left to answer
        finally:
            if watch is not None:
                watch.close()

    def _refusal(self, method: str, path: str, headers: dict[str, str]) -> OpenAIError | None:
        if self.access is None:
            return None
        route = _classify(method, path)
        if route is None:
            return None
        denial = self.access.check(route[0], route[1], headers)
        if denial is None:
            return None
        if denial.reason is Refusal.RESTRICTED:
            message = f"This API is restricted, expecting header '{denial.message}'"
            return OpenAIError(403, message, "permission_error", code="restricted_api")
        if denial.reason is Refusal.UNAUTHENTICATED:
            unauthenticated = OpenAIError(401, denial.message, "authentication_error", code="invalid_api_key")
            unauthenticated.extra_headers.append((b"www-authenticate", b'Bearer realm="naiad"'))
            return unauthenticated
        return OpenAIError(403, denial.message, "permission_error", code="insufficient_scope")

    async def _route(self, method: str, path: str, body: bytes) -> _Reply:
        if path == "/v1/completions" or path == "/v1/chat/completions":
            if method != "POST":
                raise _not_allowed(method, path)
            chat = path == "/v1/chat/completions"
            return await self._generate(decode_chat(body) if chat else decode_completion(body))
        if path == "/v1/models":
            if method != "GET":
                raise _not_allowed(method, path)
            return 200, models_list(await self._generators(), self.created), list(_JSON)
        if path.startswith("/v1/models/"):
            if method != "GET":
                raise _not_allowed(method, path)
            name = path[len("/v1/models/") :]
            if name not in await self._generators():
                raise model_not_found(name)
            return 200, orjson.dumps(model_document(name, self.created)), list(_JSON)
        if path == "/health/ready":
            if method != "GET":
                raise _not_allowed(method, path)
            return (200 if self.dataplane.ready() else 503), b"", [(b"content-type", b"text/plain")]
        raise OpenAIError(404, f"no route for {method} {path}", code="not_found")

    async def _generators(self) -> list[str]:
        """The ready models a completion can use (text in, text out), by name."""
        names: list[str] = []
        for entry in await self.dataplane.repository_index(ready_only=True):
            if entry.name in names:
                continue
            try:
                if is_generator(self.dataplane.signature(entry.name, "")):
                    names.append(entry.name)
            except InferenceServerError:
                continue  # unloaded meanwhile
        return names

    async def _generate(self, generation: Generation) -> _Reply:
        name = generation.model
        if not self.dataplane.model_ready(name, ""):
            raise model_not_found(name)
        check_signature(name, self.dataplane.signature(name, ""))
        prompt = generation.prompt
        if generation.chat:
            folder = self.dataplane.model_folder(name, "")
            if folder is None:
                raise OpenAIError(400, f"model '{name}' has no folder to read a chat template from")
            config = self.dataplane.model_config(name, "")
            prompt = self.templates.render(tokenizer_folder(folder, config), generation.messages)
        encoder = Encoder(generation)
        answers = self.dataplane.stream(infer_request(generation, prompt, encoder.id))
        if not generation.stream:
            return 200, await _whole(answers, encoder, generation, prompt), list(_JSON)
        try:
            first = await anext(answers)
        except BaseException:
            await answers.aclose()
            raise
        if isinstance(first[0], InferenceServerError):
            await answers.aclose()
            raise OpenAIError.of(first[0])
        return 200, _events(first, answers, encoder, generation, prompt), list(_SSE)


async def _whole(
    answers: AsyncGenerator[StreamItem, None], encoder: Encoder, generation: Generation, prompt: str
) -> bytes:
    texts = [prompt] if generation.echo else []
    usage = Usage()
    reason = None
    async with aclosing(answers):
        async for answer, _ in answers:
            if isinstance(answer, InferenceServerError):
                raise OpenAIError.of(answer)
            if isinstance(answer, EmptyFinal):
                continue
            piece = read_response(answer)
            texts.append(piece.text)
            usage.add(piece)
            reason = piece.finish_reason or reason
    return encoder.whole("".join(texts), finish_reason(reason), usage)


async def _events(
    first: StreamItem,
    answers: AsyncGenerator[StreamItem, None],
    encoder: Encoder,
    generation: Generation,
    prompt: str,
) -> AsyncGenerator[tuple[bytes, bool], None]:
    """The SSE chunks, each with whether more follow: the role (chat), one chunk per piece of text,
    the finish reason, usage, [DONE].

    Chunks that are ready at the same moment go out together, as one write and one wake-up of the
    client: the role (and an echoed prompt) with the first text, and the last text with the finish
    reason, usage, [DONE] and the end of the HTTP body.
    """
    async with aclosing(answers):
        head = encoder.first() or b""
        if generation.echo:
            head += encoder.chunk(prompt)
        usage = Usage()
        reason = None
        item = first
        text = ""
        while True:
            answer, final = item
            if isinstance(answer, InferenceServerError):
                yield head + OpenAIError.of(answer).event(), False
                return
            text = ""
            if not isinstance(answer, EmptyFinal):
                piece = read_response(answer)
                usage.add(piece)
                reason = piece.finish_reason or reason
                text = piece.text
            if final:
                break
            if text:
                yield head + encoder.chunk(text), True
                head = b""
            elif head:
                yield head, True
                head = b""
            try:
                item = await anext(answers)
            except StopAsyncIteration:
                text = ""
                break
        last = head + encoder.chunk(text, finish_reason(reason))
        if generation.include_usage:
            last += encoder.usage_chunk(usage)
        yield last + DONE, False


class _DisconnectWatch:
    """Cancels the task serving a request once its client disconnects (after the body was read,
    ASGI ``receive`` returns only for that), so the data plane cancels the model's request."""

    __slots__ = ("_active", "_gone", "_task", "_waiting")

    def __init__(self, receive: Receive) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._active = True
        self._gone = False
        self._waiting = asyncio.ensure_future(receive())
        self._waiting.add_done_callback(self._received)

    def _received(self, waiting: asyncio.Future[Message]) -> None:
        if not self._active or waiting.cancelled() or waiting.exception() is not None:
            return
        if waiting.result().get("type") == "http.disconnect":
            self._gone = True
            self._task.cancel()

    def gone(self) -> bool:
        """Whether the client disconnected (then the task's cancellation was ours: it is taken back)."""
        if self._gone and self._task.cancelling():
            self._task.uncancel()
        return self._gone

    def close(self) -> None:
        self._active = False
        self._waiting.cancel()


def _classify(method: str, path: str) -> tuple[Api, Need] | None:
    """The API group and scope of a route, as Triton's OpenAI frontend groups them."""
    if path in ("/v1/completions", "/v1/chat/completions"):
        return Api.INFERENCE, Scope.INFER
    if path == "/v1/models" or path.startswith("/v1/models/"):
        return Api.MODEL_REPOSITORY, Scope.READ
    if path == "/health/ready":
        return Api.HEALTH, None
    return None


def _not_allowed(method: str, path: str) -> OpenAIError:
    return OpenAIError(405, f"{method} is not allowed on {path}", code="method_not_allowed")


async def _send(send: Send, status: int, body: bytes | _Stream, headers: list[tuple[bytes, bytes]]) -> None:
    if isinstance(body, bytes):
        headers = [*headers, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    more = True
    async with aclosing(body):
        await send({"type": "http.response.start", "status": status, "headers": headers})
        async for chunk, more in body:
            await send({"type": "http.response.body", "body": chunk, "more_body": more})
    if more:  # the chunks ended without a last one
        await send({"type": "http.response.body", "body": b""})
