"""OpenAI's completions and chat completions <-> core requests and responses.

A text-generation model takes its prompt in a BYTES input ``text_input`` and answers with BYTES
``text_output`` (a decoupled model: one response per token; any other: one response with the whole
text).  Sampling settings travel as request parameters (``max_tokens``, ``temperature``, ``top_p``,
``seed``, ``stop`` as a JSON list of strings, ``stream``, false when the client wants the text whole,
and ``add_special_tokens``, false for a prompt rendered from a chat template), so the same model
serves ``generate`` and ``generate_stream`` callers unchanged.  A model may add ``finish_reason``
("stop" or "length"), ``num_input_tokens`` and ``num_output_tokens`` to a response (the final one,
say): they become the choice's ``finish_reason`` and the ``usage`` counts.

Request bodies are checked against OpenAI's API reference (types and ranges); features a model cannot
honour here (``n`` > 1, log probabilities, tools, ``suffix``, penalties, ``logit_bias``) are refused
with 400 rather than silently ignored.  Errors use OpenAI's shape,
``{"error": {"message", "type", "param", "code"}}``.

Streams are Server-Sent Events, ``data: <chunk>`` per token and ``data: [DONE]`` at the end.  Chunks
are written from bytes prepared once per request, so a token costs one string encode.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from naiad.core.errors import ErrorCode, InferenceServerError
from naiad.core.request import InferRequest, InferResponse, Parameters, Tensor
from naiad.core.signature import ModelSignature

TEXT_INPUT = "text_input"
TEXT_OUTPUT = "text_output"
DONE = b"data: [DONE]\n\n"

_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INTERNAL: 500,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.UNSUPPORTED: 400,
    ErrorCode.UNKNOWN: 500,
    ErrorCode.INVALID_ARG: 400,
    ErrorCode.ALREADY_EXISTS: 400,
    ErrorCode.CANCELLED: 400,
}


class OpenAIError(Exception):
    """An error as OpenAI reports it: HTTP status and ``{"error": {...}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code
        #: Headers the answer needs beyond its content type (``WWW-Authenticate`` for a 401).
        self.extra_headers: list[tuple[bytes, bytes]] = []

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"content-type", b"application/json"), *self.extra_headers]

    def body(self) -> bytes:
        return orjson.dumps(
            {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}
        )

    def event(self) -> bytes:
        """The error as an event of a stream already under way."""
        return b"data: " + self.body() + b"\n\n"

    @classmethod
    def of(cls, error: InferenceServerError) -> OpenAIError:
        """A server or model error (Triton's code) in OpenAI's terms."""
        status = _STATUS.get(error.code, 500)
        kind = "invalid_request_error" if status < 500 else "server_error"
        if error.code is ErrorCode.UNAVAILABLE:
            kind = "service_unavailable"
        return cls(status, error.message, kind)


def model_not_found(name: str) -> OpenAIError:
    return OpenAIError(404, f"The model '{name}' does not exist", param="model", code="model_not_found")


def check_signature(name: str, signature: ModelSignature) -> None:
    """400 unless the model takes ``text_input`` and produces ``text_output`` (both BYTES)."""
    spec_in, spec_out = signature.input_spec(TEXT_INPUT), None
    for spec in signature.outputs:
        if spec.name == TEXT_OUTPUT:
            spec_out = spec
    if spec_in is None or spec_out is None or spec_in.datatype != "BYTES" or spec_out.datatype != "BYTES":
        raise OpenAIError(
            400,
            f"model '{name}' is not a text-generation model: it needs a BYTES input '{TEXT_INPUT}' and a "
            f"BYTES output '{TEXT_OUTPUT}'",
            param="model",
        )


def is_generator(signature: ModelSignature) -> bool:
    try:
        check_signature(signature.name, signature)
    except OpenAIError:
        return False
    return True


# ---- requests ----------------------------------------------------------------------------------------


class _Body(BaseModel):
    """Fields both endpoints share; unknown fields are ignored, as OpenAI's own server does."""

    model_config = ConfigDict(extra="ignore")

    model: str
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    n: Annotated[int, Field(ge=1)] | None = None
    seed: int | None = None
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None


class _CompletionBody(_Body):
    prompt: str | list[str]
    echo: bool | None = False
    suffix: str | None = None
    logprobs: int | None = None
    best_of: int | None = None


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: str
    text: str | None = None


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_Part] | None = None
    name: str | None = None


class _ChatBody(_Body):
    messages: Annotated[list[_Message], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None


@dataclass(slots=True)
class Generation:
    """One completions or chat completions request, checked."""

    chat: bool
    model: str
    stream: bool
    include_usage: bool
    parameters: Parameters
    prompt: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)
    echo: bool = False


def decode_completion(body: bytes) -> Generation:
    """``POST /v1/completions``: the checked request (400 :class:`OpenAIError` otherwise)."""
    parsed = _parse(_CompletionBody, body)
    prompt = parsed.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise OpenAIError(400, "only one prompt per request is supported", param="prompt")
        prompt = prompt[0]
    if not prompt:
        raise OpenAIError(400, "the prompt must not be empty", param="prompt")
    _refuse(parsed.suffix is not None, "suffix")
    _refuse(bool(parsed.logprobs), "logprobs")
    _refuse(parsed.best_of is not None and parsed.best_of > 1, "best_of")
    return Generation(
        chat=False,
        model=parsed.model,
        stream=bool(parsed.stream),
        include_usage=_include_usage(parsed),
        parameters=_parameters(parsed, parsed.max_tokens),
        prompt=prompt,
        echo=bool(parsed.echo),
    )


def decode_chat(body: bytes) -> Generation:
    """``POST /v1/chat/completions``: the checked request (400 :class:`OpenAIError` otherwise)."""
    parsed = _parse(_ChatBody, body)
    _refuse(bool(parsed.logprobs) or parsed.top_logprobs is not None, "logprobs")
    _refuse(bool(parsed.tools), "tools")
    _refuse(
        parsed.response_format is not None and parsed.response_format.get("type", "text") != "text",
        "response_format",
    )
    messages = []
    for message in parsed.messages:
        content = message.content
        if isinstance(content, list):
            if any(part.type != "text" for part in content):
                raise OpenAIError(400, "only text content parts are supported", param="messages")
            content = "".join(part.text or "" for part in content)
        messages.append({"role": message.role, "content": content or ""})
    max_tokens = parsed.max_completion_tokens
    if max_tokens is None:
        max_tokens = parsed.max_tokens
    return Generation(
        chat=True,
        model=parsed.model,
        stream=bool(parsed.stream),
        include_usage=_include_usage(parsed),
        parameters=_parameters(parsed, max_tokens),
        messages=messages,
    )


def _parse(schema: type[_Body], body: bytes) -> Any:
    try:
        return schema.model_validate_json(body)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        if error["type"] == "json_invalid":
            raise OpenAIError(400, f"the request body is not valid JSON: {error['msg']}") from None
        location = [str(part) for part in error["loc"]]
        where = ".".join(location) or "body"
        raise OpenAIError(400, f"{where}: {error['msg']}", param=location[0] if location else None) from None


def _refuse(condition: bool, name: str) -> None:
    if condition:
        raise OpenAIError(400, f"'{name}' is not supported by this server", param=name)


def _include_usage(parsed: _Body) -> bool:
    if parsed.stream_options is not None and not parsed.stream:
        raise OpenAIError(400, "stream_options can only be set when stream is true", param="stream_options")
    return bool((parsed.stream_options or {}).get("include_usage", False))


def _parameters(parsed: _Body, max_tokens: int | None) -> Parameters:
    if parsed.n is not None and parsed.n != 1:
        raise OpenAIError(400, f"n={parsed.n} is not supported: only one choice (n=1) per request", param="n")
    _refuse(bool(parsed.presence_penalty), "presence_penalty")
    _refuse(bool(parsed.frequency_penalty), "frequency_penalty")
    _refuse(bool(parsed.logit_bias), "logit_bias")
    parameters: Parameters = {}
    if max_tokens is not None:
        parameters["max_tokens"] = max_tokens
    if parsed.temperature is not None:
        parameters["temperature"] = parsed.temperature
    if parsed.top_p is not None:
        parameters["top_p"] = parsed.top_p
    if parsed.seed is not None:
        if parsed.seed < 0:
            raise OpenAIError(400, "seed must not be negative", param="seed")
        parameters["seed"] = parsed.seed
    stop = [parsed.stop] if isinstance(parsed.stop, str) else parsed.stop
    if stop:
        if not all(stop):
            raise OpenAIError(400, "stop strings must not be empty", param="stop")
        parameters["stop"] = orjson.dumps(stop).decode()
    return parameters


def infer_request(generation: Generation, prompt: str, request_id: str, version: str = "") -> InferRequest:
    """The core request for the model: the prompt as ``text_input``, sampling as parameters.

    A chat prompt comes from the chat template with its special tokens already in place (a BOS token,
    say), so it carries ``add_special_tokens`` false: a model tokenizing it should not add them again.
    """
    data = np.array([prompt.encode("utf-8")], dtype=np.object_)
    parameters = dict(generation.parameters)
    parameters["stream"] = generation.stream
    if generation.chat:
        parameters["add_special_tokens"] = False
    return InferRequest(
        model_name=generation.model,
        model_version=version,
        id=request_id,
        inputs=[Tensor(TEXT_INPUT, "BYTES", data)],
        parameters=parameters,
    )


# ---- responses ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Piece:
    """What one model response says: its text, and what a last response may add."""

    text: str
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def read_response(response: InferResponse) -> Piece:
    piece = Piece("")
    for tensor in response.outputs:
        name = tensor.name
        if name == TEXT_OUTPUT:
            data = tensor.data
            if data.size == 1:  # one token's text: the common case, once per token
                piece.text = _text(data.flat[0])
            else:
                piece.text = "".join(_text(item) for item in data.reshape(-1))
        elif name == "finish_reason" and tensor.data.size:
            piece.finish_reason = _text(tensor.data.reshape(-1)[0])
        elif name == "num_input_tokens" and tensor.data.size:
            piece.prompt_tokens = int(tensor.data.reshape(-1)[0])
        elif name == "num_output_tokens" and tensor.data.size:
            piece.completion_tokens = int(tensor.data.reshape(-1)[0])
    return piece


def _text(item: Any) -> str:
    return item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)


@dataclass(slots=True)
class Usage:
    """Token counts as the model reported them (``None`` until it does)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def add(self, piece: Piece) -> None:
        if piece.prompt_tokens is not None:
            self.prompt_tokens = piece.prompt_tokens
        if piece.completion_tokens is not None:
            self.completion_tokens = piece.completion_tokens

    def document(self) -> dict[str, int] | None:
        if self.prompt_tokens is None or self.completion_tokens is None:
            return None
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


def finish_reason(reported: str | None) -> str:
    """OpenAI's ``finish_reason`` for what the model reported ("stop" when it said nothing)."""
    return reported if reported in ("stop", "length") else "stop"


class Encoder:
    """The response documents of one request, chat or completion, whole or as stream chunks."""

    __slots__ = ("_chat", "_chunk_head", "_created", "_id", "_model")

    def __init__(self, generation: Generation) -> None:
        self._chat = generation.chat
        self._id = f"{'chatcmpl' if generation.chat else 'cmpl'}-{uuid.uuid4().hex}"
        self._created = int(time.time())
        self._model = generation.model
        kind = "chat.completion.chunk" if self._chat else "text_completion"
        head = {"id": self._id, "object": kind, "created": self._created, "model": self._model}
        # Every chunk starts with the same bytes: {"id":...,"model":...,"choices":[{"index":0,
        self._chunk_head = b"data: " + orjson.dumps(head)[:-1] + b',"choices":[{"index":0,'

    @property
    def id(self) -> str:
        return self._id

    def whole(self, text: str, reason: str, usage: Usage) -> bytes:
        """The non-streamed response."""
        choice: dict[str, Any] = {"index": 0}
        if self._chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        choice["logprobs"] = None
        choice["finish_reason"] = reason
        return orjson.dumps(
            {
                "id": self._id,
                "object": "chat.completion" if self._chat else "text_completion",
                "created": self._created,
                "model": self._model,
                "choices": [choice],
                "usage": usage.document(),
            }
        )

    def first(self) -> bytes | None:
        """A chat stream's first chunk, which names the role; ``None`` for completions."""
        if not self._chat:
            return None
        role = b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
        return self._chunk_head + role

    def chunk(self, text: str, reason: str | None = None) -> bytes:
        """One stream chunk: a piece of text, and the finish reason on the last one."""
        encoded = orjson.dumps(text)
        if reason is None:  # a token's chunk: the common case
            if self._chat:
                return self._chunk_head + b'"delta":{"content":' + encoded + b"}" + _OPEN_TAIL
            return self._chunk_head + b'"text":' + encoded + _OPEN_TAIL
        tail = b',"logprobs":null,"finish_reason":"' + reason.encode() + b'"}]}\n\n'
        if self._chat:
            delta = b'"delta":{"content":' + encoded + b"}" if text else b'"delta":{}'
            return self._chunk_head + delta + tail
        return self._chunk_head + b'"text":' + encoded + tail

    def usage_chunk(self, usage: Usage) -> bytes:
        """The chunk ``stream_options.include_usage`` asks for: no choices, the request's usage."""
        kind = "chat.completion.chunk" if self._chat else "text_completion"
        document = {
            "id": self._id,
            "object": kind,
            "created": self._created,
            "model": self._model,
            "choices": [],
            "usage": usage.document(),
        }
        return b"data: " + orjson.dumps(document) + b"\n\n"


#: The end of a chunk that has no finish reason yet.
_OPEN_TAIL = b',"logprobs":null,"finish_reason":null}]}\n\n'


def models_list(names: list[str], created: int) -> bytes:
    """``GET /v1/models``."""
    return orjson.dumps({"object": "list", "data": [model_document(name, created) for name in names]})


def model_document(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "naiad"}
