"""Chat messages -> the prompt a model was trained on, with the chat template of the model's tokenizer.

A language model's folder keeps a Hugging Face tokenizer configuration (``tokenizer_config.json``,
with its ``chat_template``, or a ``chat_template.jinja`` beside it): in the folder named by the
model's ``tokenizer`` config parameter, else by its ``checkpoint`` parameter (relative to the model's
folder), else the model's folder itself.  Rendering uses ``transformers`` (the ``naiad[llm]`` extra),
so templates behave exactly as they do for the model's own users; it is imported only when a chat
request first needs it, and each tokenizer is loaded once (off the event loop) per folder.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from naiad.core.errors import InvalidArgumentError, UnsupportedError

_PARAMETERS = ("tokenizer", "checkpoint")


def tokenizer_folder(model_folder: Path, config: dict[str, Any]) -> Path:
    """Where a model's tokenizer configuration lives (see the module docstring)."""
    parameters = config.get("parameters") or {}
    for name in _PARAMETERS:
        value = (parameters.get(name) or {}).get("string_value", "")
        if value:
            path = Path(value)
            return path if path.is_absolute() else model_folder / path
    return model_folder


class ChatTemplates:
    """Loaded tokenizers by folder; ``render`` turns messages into a prompt."""

    def __init__(self) -> None:
        self._tokenizers: dict[Path, asyncio.Future[Any]] = {}

    async def render(self, folder: Path, messages: list[dict[str, str]]) -> str:
        tokenizer = await self._tokenizer(folder)
        if not getattr(tokenizer, "chat_template", None):
            raise InvalidArgumentError(
                f"the model's tokenizer configuration in {folder.name} has no chat template: use "
                "/v1/completions"
            )
        try:
            prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # the template's own raise_exception(), or a template error
            raise InvalidArgumentError(f"the chat template refused the messages: {exc}") from None
        return str(prompt)

    async def _tokenizer(self, folder: Path) -> Any:
        loading = self._tokenizers.get(folder)
        if loading is None:
            loading = asyncio.ensure_future(asyncio.to_thread(_load, folder))
            self._tokenizers[folder] = loading
        try:
            return await asyncio.shield(loading)
        except Exception:
            if self._tokenizers.get(folder) is loading:
                del self._tokenizers[folder]  # try again next time (the folder may be fixed)
            raise


def _load(folder: Path) -> Any:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise UnsupportedError(
            "chat completions need the chat template renderer: pip install 'naiad[llm]'"
        ) from None
    if not (folder / "tokenizer_config.json").is_file():
        raise InvalidArgumentError(
            f"the model has no tokenizer configuration ({folder / 'tokenizer_config.json'}): set its "
            "'tokenizer' or 'checkpoint' config parameter, or use /v1/completions"
        )
    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:
        raise InvalidArgumentError(f"cannot load the model's tokenizer from {folder}: {exc}") from None
