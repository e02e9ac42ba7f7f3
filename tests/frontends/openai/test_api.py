"""The OpenAI API of a server running the text-generation example, driven by the official client.

Greedy decoding (temperature 0) and seeded sampling make the tiny model's text repeatable, so streamed
and whole answers, chat and plain completions, and the generate endpoints can be compared exactly.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.request
from typing import Any

import openai
import pytest

from tests.frontends.openai.conftest import MODEL, LlmServer
from tests.support.http import RawClient

PROMPT = "The river begins"
MESSAGES: list[Any] = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "How deep is the pool below the wheel?"},
]


def complete(client: openai.OpenAI, **options: Any) -> Any:
    return client.completions.create(model=MODEL, prompt=PROMPT, **options)


def test_models_lists_the_text_generation_model(client: openai.OpenAI) -> None:
    listed = client.models.list().data
    assert [(m.id, m.object, m.owned_by) for m in listed] == [(MODEL, "model", "naiad")]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("absent")
    assert info.value.code == "model_not_found"


def test_a_completion_counts_its_tokens_and_ends_at_max_tokens(client: openai.OpenAI, tokenizer: Any) -> None:
    done = complete(client, max_tokens=7, temperature=0)
    choice = done.choices[0]
    assert done.object == "text_completion" and done.id.startswith("cmpl-") and done.model == MODEL
    assert choice.finish_reason == "length" and choice.text and choice.index == 0
    prompt_tokens = len(tokenizer(PROMPT).input_ids)
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (prompt_tokens, 7)
    assert done.usage.total_tokens == prompt_tokens + 7


def test_a_streamed_completion_is_the_whole_one_sent_token_by_token(client: openai.OpenAI) -> None:
    whole = complete(client, max_tokens=12, temperature=0).choices[0].text
    chunks = list(complete(client, max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True}))
    with_choices = [c for c in chunks if c.choices]
    texts = [c.choices[0].text for c in with_choices]
    assert "".join(texts) == whole
    # One chunk per token as the model sends them (a token ending inside a UTF-8 character waits for
    # the next one, so there may be fewer chunks than tokens, never more).
    assert 2 <= len([t for t in texts if t]) <= 12
    assert [c.choices[0].finish_reason for c in with_choices] == [None] * (len(texts) - 1) + ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert len({c.id for c in chunks}) == 1


def test_echo_puts_the_prompt_before_the_completion(client: openai.OpenAI) -> None:
    plain = complete(client, max_tokens=3, temperature=0).choices[0].text
    assert complete(client, max_tokens=3, temperature=0, echo=True).choices[0].text == PROMPT + plain
    chunks = list(complete(client, max_tokens=3, temperature=0, echo=True, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == PROMPT + plain


def test_a_chat_completion_renders_the_models_chat_template(client: openai.OpenAI, tokenizer: Any) -> None:
    done = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=5, temperature=0)
    prompt = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")
    assert done.object == "chat.completion" and done.id.startswith("chatcmpl-")
    assert done.choices[0].message.role == "assistant" and done.choices[0].finish_reason == "length"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (len(tokenizer(prompt).input_ids), 5)
    # The model saw exactly the rendered template: the same prompt as a completion gives the same text.
    same = client.completions.create(model=MODEL, prompt=prompt, max_tokens=5, temperature=0)
    assert same.choices[0].text == done.choices[0].message.content


def test_a_streamed_chat_names_the_role_then_streams_the_content(client: openai.OpenAI) -> None:
    options: dict[str, Any] = {"model": MODEL, "messages": MESSAGES, "max_completion_tokens": 6, "temperature": 0}
    whole = client.chat.completions.create(**options).choices[0].message.content
    chunks = list(client.chat.completions.create(stream=True, **options))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole
    assert [c.choices[0].finish_reason for c in chunks][-1] == "length"
    assert {(c.object, c.id) for c in chunks} == {("chat.completion.chunk", chunks[0].id)}


def test_stop_strings_end_the_text_before_them(client: openai.OpenAI) -> None:
    sampled = complete(client, max_tokens=24, temperature=1, seed=11).choices[0].text
    assert len(sampled) > 16, sampled
    stop = sampled[12:15]
    expected = sampled[: sampled.index(stop)]
    done = complete(client, max_tokens=24, temperature=1, seed=11, stop=[stop, "never said"])
    assert (done.choices[0].text, done.choices[0].finish_reason) == (expected, "stop")
    chunks = list(complete(client, max_tokens=24, temperature=1, seed=11, stop=stop, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == expected
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_a_seed_makes_sampling_repeatable(client: openai.OpenAI) -> None:
    first = complete(client, max_tokens=16, temperature=1, seed=5).choices[0].text
    again = complete(client, max_tokens=16, temperature=1, seed=5).choices[0].text
    other = complete(client, max_tokens=16, temperature=1, seed=6).choices[0].text
    assert first == again and first != other


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"n": 2}, "n"),
        ({"temperature": 2.5}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"logprobs": 2}, "logprobs"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
def test_bad_parameters_are_refused_with_400(client: openai.OpenAI, options: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        complete(client, **options)
    assert info.value.status_code == 400 and info.value.param == param
    assert info.value.type == "invalid_request_error"


def test_chat_refuses_n_above_one(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, n=3)
    assert "n=3" in info.value.message and info.value.param == "n"


def test_an_unknown_model_is_404_model_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="absent", prompt="x")
    assert info.value.code == "model_not_found" and info.value.param == "model"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="absent", messages=MESSAGES)


def test_the_models_own_refusal_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt="river " * 5000, max_tokens=1)
    assert "context is 4096 tokens" in info.value.message


def test_malformed_requests_get_openais_error_shape(server: LlmServer) -> None:
    raw = RawClient(f"127.0.0.1:{server.openai_port}")
    for method, path, body, status in [
        ("POST", "/v1/completions", b"{not json", 400),
        ("POST", "/v1/completions", b'{"prompt": "x"}', 400),
        ("POST", "/v1/chat/completions", b'{"model": "tiny_llm", "messages": []}', 400),
        ("GET", "/v1/completions", None, 405),
        ("GET", "/v1/embeddings", None, 404),
    ]:
        answer = raw.request(method, path, body, {"content-type": "application/json"})
        error = answer.json()["error"]
        assert answer.status == status, (path, answer.body)
        assert set(error) == {"message", "type", "param", "code"} and error["message"]
    missing = raw.request("POST", "/v1/completions", b'{"prompt": "x"}').json()["error"]
    assert missing["param"] == "model"
    raw.close()


def test_a_client_that_disconnects_cancels_the_generation(server: LlmServer) -> None:
    body = json.dumps({"model": MODEL, "prompt": PROMPT, "max_tokens": 4000, "temperature": 0, "stream": True})
    connection = http.client.HTTPConnection("127.0.0.1", server.openai_port, timeout=30)
    connection.request("POST", "/v1/completions", body, {"content-type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    events = []
    while len(events) < 4:  # a few tokens, then the client goes
        line = response.readline()
        if line.startswith(b"data: "):
            events.append(json.loads(line[len(b"data: ") :]))
    request_id = events[0]["id"]
    assert connection.sock is not None
    connection.sock.shutdown(socket.SHUT_RDWR)
    response.close()
    connection.close()
    deadline = time.monotonic() + 20
    marker = f"request '{request_id}' cancelled after "
    while marker not in server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    log = server.log()
    assert marker in log, log[-2000:]
    generated = int(log.split(marker, 1)[1].split(" ", 1)[0])
    assert 3 <= generated < 4000


def test_a_client_that_leaves_before_a_whole_answer_cancels_it_too(server: LlmServer) -> None:
    def cancelled() -> tuple[int, int]:
        """(generations the model stopped, requests cancelled before the model had them)."""
        raw = RawClient(server.http_url)
        stats = raw.request("GET", f"/v2/models/{MODEL}/stats").json()["model_stats"][0]
        raw.close()
        return server.log().count("cancelled after "), int(stats["inference_stats"]["fail"]["count"])

    before = cancelled()
    # Greedy, so the text cannot end early on a sampled end-of-text token.
    body = json.dumps({"model": MODEL, "prompt": PROMPT, "max_tokens": 4000, "temperature": 0})
    connection = http.client.HTTPConnection("127.0.0.1", server.openai_port, timeout=30)
    connection.request("POST", "/v1/completions", body, {"content-type": "application/json"})
    time.sleep(1.0)  # generating by now (on a loaded machine, maybe still queued): the answer takes seconds
    assert connection.sock is not None
    connection.sock.shutdown(socket.SHUT_RDWR)
    connection.close()
    deadline = time.monotonic() + 20
    while cancelled() == before and time.monotonic() < deadline:
        time.sleep(0.1)
    stopped, dropped = cancelled()
    assert (stopped - before[0]) + (dropped - before[1]) == 1


def test_generate_and_generate_stream_serve_the_same_model(server: LlmServer, client: openai.OpenAI) -> None:
    whole = complete(client, max_tokens=6, temperature=0).choices[0].text
    raw = RawClient(server.http_url)
    request = {"text_input": PROMPT, "parameters": {"max_tokens": 6, "temperature": 0}}
    one = raw.post_json(f"/v2/models/{MODEL}/generate", {**request, "stream": False})
    assert one.status == 200, one.body
    document = one.json()
    assert (document["text_output"], document["finish_reason"], document["num_output_tokens"]) == (whole, "length", 6)
    streamed = raw.post_json(f"/v2/models/{MODEL}/generate_stream", request)
    assert streamed.status == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(e[len(b"data: ") :]) for e in streamed.body.split(b"\n\n") if e.startswith(b"data: ")]
    assert len(events) == 7  # six tokens, then the final response with the finish reason and counts
    assert "".join(e["text_output"] for e in events) == whole and events[-1]["finish_reason"] == "length"
    raw.close()


def test_openai_requests_count_in_the_models_statistics_and_metrics(server: LlmServer, client: openai.OpenAI) -> None:
    def successes() -> int:
        raw = RawClient(server.http_url)
        stats = raw.request("GET", f"/v2/models/{MODEL}/stats").json()["model_stats"][0]
        raw.close()
        return int(stats["inference_stats"]["success"]["count"])

    def metric() -> float:
        with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as page:
            text = page.read().decode()
        line = next(x for x in text.splitlines() if x.startswith("nv_inference_request_success{") and MODEL in x)
        return float(line.rsplit(" ", 1)[1])

    before, metric_before = successes(), metric()
    complete(client, max_tokens=3)
    list(client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3, stream=True))
    assert successes() == before + 2
    assert metric() == metric_before + 2
