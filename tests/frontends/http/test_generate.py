"""The generate extension's request objects as Triton reads them (NVIDIA's qa L0_http
generate_endpoint_test covers the same rules): members in the order written, values shaped to the
model's input shape, Triton's words for a value of the wrong JSON type, an input given twice, missing
inputs and misplaced parameters; the request's id and the response's parameters in the answer."""

from __future__ import annotations

import json

import pytest

from tests.support.http import RawClient

URL = "/v2/models/prompted/generate"


def _post(raw: RawClient, body: str | dict[str, object]) -> tuple[int, dict[str, object]]:
    text = body if isinstance(body, str) else json.dumps(body)
    response = raw.request("POST", URL, text.encode(), {"Content-Type": "application/json"})
    return response.status, json.loads(response.body)


def test_values_take_the_models_shapes_and_the_answer_carries_id_and_parameters(raw: RawClient) -> None:
    status, answer = _post(raw, {"PROMPT": "hi", "STREAM": False, "IDS": [7, 8], "id": "r1", "style": "terse"})
    assert status == 200, answer
    assert answer == {
        "id": "r1",
        "model_name": "prompted",
        "model_version": "1",
        "style": "terse",
        "shapes": "[(1, 1), (1, 1)]",
        "TEXT": ["hi", "7", "8"],
    }
    status, answer = _post(raw, {"PROMPT": ["hi"], "STREAM": [True], "id": ""})
    assert status == 200 and "id" not in answer and answer["TEXT"] == "hi"
    status, answer = _post(raw, {"PROMPT": "hi", "STREAM": True, "parameters": {"top_k": 3, "IDS": [4]}})
    assert (status, answer["top_k"], answer["TEXT"]) == (200, 3, ["hi", "4"])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"PROMPT": 123, "STREAM": False}, "attempt to access JSON non-string as string"),
        ({"PROMPT": "hello", "STREAM": "false"}, "attempt to access JSON non-boolean as boolean"),
        ({"PROMPT": True, "STREAM": 123}, "attempt to access JSON non-string as string"),
        ({"STREAM": 123, "PROMPT": True}, "attempt to access JSON non-boolean as boolean"),
        ({"PROMPT": "a", "STREAM": False, "IDS": [1.5]}, "attempt to access JSON non-signed-integer as signed-integer"),
        ('{"PROMPT": "a", "STREAM": false, "STREAM": true, "PROMPT": "b"}', "input 'STREAM' already exists in request"),
        ('{"PROMPT": "a", "STREAM": false, "PROMPT": "b"}', "input 'PROMPT' already exists in request"),
        ({}, "expected number of inputs between 2 and 3 but got 0 inputs for model 'prompted'"),
        ({"STREAM": False, "other": "x"}, "expected number of inputs between 2 and 3 but got 1 inputs"),
        ({"PROMPT": ["a", "b"], "STREAM": False}, "The schema can not convert input 'PROMPT' to tensor with proper shape"),
        ({"PROMPT": [], "STREAM": False}, "The schema can not convert input 'PROMPT' to tensor with proper shape"),
        (
            {"PROMPT": "a", "STREAM": False, "PARAMS": {"x": 1}},
            "parameter 'PARAMS' has invalid type. It should be either 'int', 'bool', or 'string'.",
        ),
        ({"PROMPT": "a", "STREAM": False, "parameters": 1}, "Expected JSON object for keyword: 'parameters'"),
        (
            {"PROMPT": "a", "STREAM": False, "parameters": {"nested": {"twice": 1}}},
            "Converting keyword: 'parameters': parameter 'nested' has invalid type.",
        ),
    ],
)
def test_a_request_triton_refuses_is_refused_in_its_words(
    raw: RawClient, body: str | dict[str, object], message: str
) -> None:
    status, answer = _post(raw, body)
    assert status == 400
    assert message in str(answer["error"])


@pytest.mark.parametrize(("count", "status"), [(0, 500), (2, 200)])
def test_a_streams_error_response_is_an_event_with_its_status_when_it_comes_first(
    raw: RawClient, count: int, status: int
) -> None:
    """As Triton sends it: the model's error response as the first answer sets the status (the event
    still comes, as an event); after answers it is one more event."""
    body = json.dumps({"IN": 7, "COUNT": count}).encode()
    response = raw.request("POST", "/v2/models/streamed/generate_stream", body, {"Content-Type": "application/json"})
    assert response.status == status
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    events = [json.loads(chunk.removeprefix(b"data: ")) for chunk in response.body.split(b"\n\n") if chunk]
    assert [event.get("OUT", event.get("error")) for event in events] == [7] * count + ["the stream broke"]


def test_the_answer_is_written_as_triton_writes_it(raw: RawClient) -> None:
    # members sorted by name (Triton keeps them in a std::map): outputs before id and model_name here
    body = '{"INPUT0": [NaN, Infinity, -Infinity, 0.5], "id": "r2"}'
    answer = raw.request("POST", "/v2/models/identity_fp32/generate", body)
    assert answer.status == 200, answer.body
    assert answer.body == b'{"OUTPUT0":[NaN,Infinity,-Infinity,0.5],"id":"r2","model_name":"identity_fp32","model_version":"1"}'
    one = raw.request("POST", "/v2/models/identity_fp64/generate", '{"INPUT0": [-Infinity]}')
    assert one.body == b'{"OUTPUT0":-Infinity,"model_name":"identity_fp64","model_version":"1"}'
