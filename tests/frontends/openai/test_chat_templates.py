"""Chat templates render as ``transformers`` renders them: the same prompt from the same tokenizer
configuration, for templates that use what real models' templates use (special tokens, loop controls,
``tojson``, ``raise_exception``), and the same refusal when a template raises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from naiad.core.errors import InvalidArgumentError
from naiad.frontends.openai.chat import ChatTemplates, tokenizer_folder

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": 'Say "hi"'},
    {"role": "assistant", "content": "hi"},
    {"role": "user", "content": "Again?"},
]

TEMPLATES = {
    "llama-like": (
        "{{ bos_token }}{% for message in messages %}"
        "{{ '<|start|>' + message['role'] + '\n\n' + message['content'] | trim + '<|end|>' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|start|>assistant\n\n' }}{% endif %}"
    ),
    "alternating, with raise_exception": (
        "{% if messages[0]['role'] == 'system' %}{% set rest = messages[1:] %}{% else %}{% set rest = messages %}{% endif %}"
        "{% for message in rest %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
        "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
    ),
    "tojson and loop controls": (
        "{% for message in messages %}{% if message['role'] == 'system' %}{% continue %}{% endif %}"
        "{{ message | tojson }}{% if loop.last %}{% break %}{% endif %}\n{% endfor %}"
    ),
}


@pytest.fixture(scope="module")
def base(checkpoint: Path) -> Any:
    """The example's tokenizer, a copy of its own: the tests change its template."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(checkpoint))


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_a_template_renders_as_transformers_renders_it(name: str, base: Any, tmp_path: Path) -> None:
    base.chat_template = TEMPLATES[name]
    base.save_pretrained(tmp_path, save_jinja_files=name != "llama-like")  # both layouts
    expected = base.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert ChatTemplates().render(tmp_path, MESSAGES) == expected


def test_a_template_that_raises_refuses_the_messages(base: Any, tmp_path: Path) -> None:
    base.chat_template = TEMPLATES["alternating, with raise_exception"]
    base.save_pretrained(tmp_path)
    twice = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(Exception, match="must alternate"):
        base.apply_chat_template(twice, tokenize=False)
    with pytest.raises(InvalidArgumentError, match="Conversation roles must alternate"):
        ChatTemplates().render(tmp_path, twice)


def test_a_changed_template_is_read_again(base: Any, tmp_path: Path) -> None:
    templates = ChatTemplates()
    base.chat_template = "{% for m in messages %}A:{{ m['content'] }}{% endfor %}"
    base.save_pretrained(tmp_path, save_jinja_files=False)
    assert templates.render(tmp_path, MESSAGES[1:2]) == 'A:Say "hi"'
    base.chat_template = "{% for m in messages %}Then:{{ m['content'] }}{% endfor %}"
    base.save_pretrained(tmp_path, save_jinja_files=False)
    assert templates.render(tmp_path, MESSAGES[1:2]) == 'Then:Say "hi"'


def test_the_tokenizer_folder_comes_from_the_models_parameters(tmp_path: Path) -> None:
    def config(**parameters: str) -> dict[str, Any]:
        return {"parameters": {key: {"string_value": value} for key, value in parameters.items()}}

    assert tokenizer_folder(tmp_path, config(checkpoint="ckpt")) == tmp_path / "ckpt"
    assert tokenizer_folder(tmp_path, config(checkpoint="ckpt", tokenizer="/abs/tok")) == Path("/abs/tok")
    assert tokenizer_folder(tmp_path, {}) == tmp_path
    with pytest.raises(InvalidArgumentError, match="tokenizer configuration"):
        ChatTemplates().render(tmp_path, MESSAGES)
