"""Chat messages -> the prompt a model was trained on, with the chat template of the model's tokenizer.

A language model's folder keeps a Hugging Face tokenizer configuration: ``tokenizer_config.json``,
whose ``chat_template`` (or a ``chat_template.jinja`` beside it) is a Jinja template over ``messages``,
``add_generation_prompt`` and the special tokens.  It lives in the folder named by the model's
``tokenizer`` config parameter, else by its ``checkpoint`` parameter (relative to the model's folder),
else in the model's folder itself.

Templates are rendered with Jinja in a sandbox set up as ``transformers`` sets up its own (trimmed
blocks, loop controls, ``tojson``, ``raise_exception``, ``strftime_now``), so a model's template gives
the prompt its own users get, without loading ``transformers`` into the server.  A compiled template
is kept per folder until its files change (a model reloaded with another tokenizer gets the new one).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from naiad.core.errors import InvalidArgumentError, UnsupportedError

_PARAMETERS = ("tokenizer", "checkpoint")
_CONFIG = "tokenizer_config.json"
_JINJA = "chat_template.jinja"
_SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


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
    """Compiled chat templates by folder; :meth:`render` turns messages into a prompt."""

    def __init__(self) -> None:
        self._templates: dict[Path, tuple[tuple[tuple[int, int], tuple[int, int]], Any, dict[str, str]]] = {}

    def render(self, folder: Path, messages: list[dict[str, str]]) -> str:
        stamp = (_mtime(folder / _CONFIG), _mtime(folder / _JINJA))
        known = self._templates.get(folder)
        if known is None or known[0] != stamp:
            known = (stamp, *_load(folder))
            self._templates[folder] = known
        _, template, tokens = known
        try:
            return str(template.render(messages=messages, add_generation_prompt=True, **tokens))
        except Exception as exc:  # the template's raise_exception(), or an error in the template
            raise InvalidArgumentError(f"the chat template refused the messages: {exc}") from None


def _mtime(path: Path) -> tuple[int, int]:
    try:
        status = path.stat()
    except OSError:
        return 0, 0
    return status.st_mtime_ns, status.st_size


def _load(folder: Path) -> tuple[Any, dict[str, str]]:
    try:
        config = json.loads((folder / _CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(
            f"the model has no readable tokenizer configuration ({folder / _CONFIG}: {exc}): set its "
            "'tokenizer' or 'checkpoint' config parameter, or use /v1/completions"
        ) from None
    source = config.get("chat_template")
    if (folder / _JINJA).is_file():
        source = (folder / _JINJA).read_text(encoding="utf-8")
    if isinstance(source, list):  # named templates: the default one
        source = next((t.get("template") for t in source if t.get("name") == "default"), None)
    if not isinstance(source, str) or not source:
        raise InvalidArgumentError(
            f"the tokenizer configuration in {folder} has no chat template: use /v1/completions"
        )
    tokens: dict[str, str] = {}
    for name in _SPECIAL:
        value = config.get(name)
        if isinstance(value, dict):  # an AddedToken written out
            value = value.get("content")
        if isinstance(value, str):
            tokens[name] = value
    return _environment().from_string(source), tokens


def _environment() -> Any:
    try:
        from jinja2.exceptions import TemplateError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise UnsupportedError(
            "chat completions render chat templates with Jinja: pip install 'naiad[llm]'"
        ) from None

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
    return environment
