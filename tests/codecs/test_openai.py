"""The OpenAI codec on its own: request checks, parameters handed to the model, and the documents and
stream chunks it writes (each must parse as the JSON OpenAI's clients read)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from naiad.codecs.openai import (
    DONE,
    Encoder,
    OpenAIError,
    Usage,
    decode_chat,
    decode_completion,
    infer_request,
    read_response,
)
from naiad.core.errors import InvalidArgumentError, UnavailableError
from naiad.core.request import InferResponse, Tensor


def _body(**fields: object) -> bytes:
    return json.dumps({"model": "m", **fields}).encode()


def test_sampling_settings_become_the_models_request_parameters() -> None:
    generation = decode_completion(
        _body(prompt=["hi"], max_tokens=5, temperature=0.5, top_p=0.9, seed=3, stop="\n", user="u", n=1)
    )
    request = infer_request(generation, generation.prompt, "cmpl-1")
    assert request.model_name == "m" and request.id == "cmpl-1"
    assert request.inputs[0].name == "text_input" and request.inputs[0].data.tolist() == [b"hi"]
    assert request.parameters == {
        "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": '["\\n"]', "stream": False,
    }


def test_chat_takes_max_completion_tokens_first_and_joins_text_parts() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    generation = decode_chat(
        _body(messages=[{"role": "user", "content": parts}], max_tokens=9, max_completion_tokens=4, stream=True)
    )
    assert generation.messages == [{"role": "user", "content": "ab"}]
    assert generation.parameters == {"max_tokens": 4} and generation.stream
    request = infer_request(generation, "<s>[INST] ab [/INST]", "chatcmpl-1")
    assert request.parameters == {"max_tokens": 4, "stream": True, "add_special_tokens": False}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"[1, 2]", None),
        (_body(prompt="x", temperature="hot"), "temperature"),
        (_body(prompt=""), "prompt"),
        (_body(prompt=["a", "b"]), "prompt"),
        (_body(prompt="x", suffix="y"), "suffix"),
        (_body(prompt="x", best_of=2), "best_of"),
        (_body(prompt="x", presence_penalty=1.0), "presence_penalty"),
        (_body(prompt="x", logit_bias={"5": 1.0}), "logit_bias"),
        (_body(prompt="x", seed=-1), "seed"),
    ],
)
def test_bad_completion_requests_are_400_naming_the_parameter(body: bytes, param: str | None) -> None:
    with pytest.raises(OpenAIError) as info:
        decode_completion(body)
    assert info.value.status == 400 and info.value.param == param
    assert set(json.loads(info.value.body())["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "tools"),
        ({"messages": [{"role": "user", "content": "x"}], "logprobs": True}, "logprobs"),
        ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}, "response_format"),
    ],
)
def test_bad_chat_requests_are_400_naming_the_parameter(fields: dict[str, object], param: str) -> None:
    with pytest.raises(OpenAIError) as info:
        decode_chat(_body(**fields))
    assert (info.value.status, info.value.param) == (400, param)


def test_server_errors_keep_their_status_in_openais_shape() -> None:
    assert OpenAIError.of(InvalidArgumentError("bad")).status == 400
    unavailable = OpenAIError.of(UnavailableError("exiting"))
    assert (unavailable.status, unavailable.kind) == (503, "service_unavailable")


def test_a_response_gives_its_text_reason_and_counts() -> None:
    outputs = [
        Tensor("text_output", "BYTES", np.array([b"caf\xc3\xa9"], dtype=np.object_)),
        Tensor("finish_reason", "BYTES", np.array([b"length"], dtype=np.object_)),
        Tensor("num_input_tokens", "INT32", np.array([3], dtype=np.int32)),
        Tensor("num_output_tokens", "INT32", np.array([7], dtype=np.int32)),
    ]
    piece = read_response(InferResponse("m", "1", outputs=outputs))
    assert (piece.text, piece.finish_reason, piece.prompt_tokens, piece.completion_tokens) == ("café", "length", 3, 7)


def _event(chunk: bytes) -> dict[str, object]:
    assert chunk.startswith(b"data: ") and chunk.endswith(b"\n\n")
    document = json.loads(chunk[len(b"data: ") : -2])
    assert isinstance(document, dict)
    return document


def test_chat_stream_chunks_are_openais_json() -> None:
    encoder = Encoder(decode_chat(_body(messages=[{"role": "user", "content": "x"}], stream=True)))
    opening = encoder.first()
    assert opening is not None
    first, token, last = _event(opening), _event(encoder.chunk('say "hi"\n')), _event(encoder.chunk("", "stop"))
    assert first["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]
    assert token["choices"] == [{"index": 0, "delta": {"content": 'say "hi"\n'}, "logprobs": None, "finish_reason": None}]
    assert last["choices"] == [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]
    assert {c["object"] for c in (first, token, last)} == {"chat.completion.chunk"}
    assert first["id"] == encoder.id and str(encoder.id).startswith("chatcmpl-")
    usage = _event(encoder.usage_chunk(Usage(2, 3)))
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    assert DONE == b"data: [DONE]\n\n"


def test_completion_documents_are_openais_json() -> None:
    encoder = Encoder(decode_completion(_body(prompt="x")))
    assert encoder.first() is None
    chunk = _event(encoder.chunk("a", "length"))
    assert chunk["object"] == "text_completion" and chunk["choices"] == [
        {"index": 0, "text": "a", "logprobs": None, "finish_reason": "length"}
    ]
    whole = json.loads(encoder.whole("abc", "stop", Usage()))
    assert whole["choices"] == [{"index": 0, "text": "abc", "logprobs": None, "finish_reason": "stop"}]
    assert whole["usage"] is None  # the model reported no counts
