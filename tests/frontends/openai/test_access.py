"""Restricted APIs (``--http-restricted-api``) and bearer keys (``--auth-key-file``) on the OpenAI port.

The official client sends its ``api_key`` as ``Authorization: Bearer``, so a Naiad key is an OpenAI
API key here: inference needs the ``infer`` scope, listing models ``read``; readiness needs nothing.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.frontends.openai.conftest import MODEL, LlmServer

CALLER = "caller-token-0123456789"
READER = "reader-token-0123456789"


@pytest.fixture(scope="module")
def guarded(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmServer]:
    keys = tmp_path_factory.mktemp("keys") / "keys"
    keys.write_text(f"caller {CALLER} infer\nreader {READER} read\n")
    args = [f"--auth-key-file={keys}", "--http-restricted-api=model-repository:x-llm-admin=yes"]
    with LlmServer(args) as running:
        yield running


def _client(server: LlmServer, key: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.openai_url, api_key=key, max_retries=0, default_headers=headers)


def test_inference_needs_a_key_with_the_infer_scope(guarded: LlmServer) -> None:
    with _client(guarded, "not-a-key-at-all-000") as stranger, pytest.raises(openai.AuthenticationError) as info:
        stranger.completions.create(model=MODEL, prompt="The river", max_tokens=2)
    assert info.value.status_code == 401 and info.value.type == "authentication_error"
    assert info.value.response.headers["www-authenticate"].startswith("Bearer")
    with _client(guarded, READER) as reader, pytest.raises(openai.PermissionDeniedError) as denied:
        reader.completions.create(model=MODEL, prompt="The river", max_tokens=2)
    assert "lacks the 'infer' scope" in denied.value.message
    with _client(guarded, CALLER) as caller:
        # greedy: sampling the tiny random model can end early on its end-of-text token
        done = caller.completions.create(model=MODEL, prompt="The river", max_tokens=2, temperature=0)
    assert done.usage is not None and done.usage.completion_tokens == 2


def test_listing_models_is_the_restricted_model_repository_api(guarded: LlmServer) -> None:
    with _client(guarded, READER) as reader, pytest.raises(openai.PermissionDeniedError) as info:
        reader.models.list()
    assert info.value.message.endswith("This API is restricted, expecting header 'x-llm-admin'")
    with _client(guarded, READER, **{"x-llm-admin": "yes"}) as admitted:
        assert [m.id for m in admitted.models.list().data] == [MODEL]


def test_readiness_needs_no_credentials(guarded: LlmServer) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{guarded.openai_port}/health/ready", timeout=10) as answer:
        assert answer.status == 200
