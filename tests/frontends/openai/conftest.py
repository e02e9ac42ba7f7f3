"""A server over the text-generation example (``examples/llm``) with the OpenAI frontend on, and the
official ``openai`` client pointed at it."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.server import ROOT, ServerProcess, free_port

LLM_REPOSITORY = ROOT / "examples" / "llm" / "model_repository"
MODEL = "tiny_llm"


def build_checkpoint() -> Path:
    """The example's checkpoint, built by ``scripts/build_llm_example.py`` when missing or stale."""
    spec = importlib.util.spec_from_file_location("build_llm_example", ROOT / "scripts" / "build_llm_example.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main([])
    return Path(module.DEFAULT_OUT)


class LlmServer(ServerProcess):
    """A :class:`ServerProcess` that also serves the OpenAI API."""

    def __init__(self, args: list[str] | None = None) -> None:
        self.openai_port = free_port()
        super().__init__([LLM_REPOSITORY], [f"--openai-port={self.openai_port}", *(args or [])])

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.openai_port}/v1"


@pytest.fixture(scope="session")
def checkpoint() -> Path:
    return build_checkpoint()


@pytest.fixture(scope="session")
def tokenizer(checkpoint: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(checkpoint))


@pytest.fixture(scope="module")
def server(checkpoint: Path) -> Iterator[LlmServer]:
    with LlmServer() as running:
        yield running


@pytest.fixture(scope="module")
def client(server: LlmServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.openai_url, api_key="unused", max_retries=0, timeout=60) as made:
        yield made
