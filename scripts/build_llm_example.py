"""Build the text-generation example's checkpoint: a tiny causal LM and its tokenizer, with no downloads.

The example model (``examples/llm/model_repository/tiny_llm``) loads a Hugging Face checkpoint folder
named by its ``checkpoint`` config parameter.  Tests, benchmarks and a fresh machine cannot download
one, so this script makes one: a byte-level BPE tokenizer trained with ``tokenizers`` on the text we
ship (``examples/llm/corpus.txt``), with a ChatML chat template in its tokenizer config, and a
two-layer Llama with random weights (seeded, so every build is the same model).  What it generates is
gibberish, but it is made the way a real model's text is: tokenizer, forward passes, sampling.

Re-running is cheap: nothing is written when the checkpoint is newer than this script and the corpus
(``--force`` rebuilds)::

    python scripts/build_llm_example.py [--force] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "examples" / "llm" / "corpus.txt"
DEFAULT_OUT = ROOT / "examples" / "llm" / "model_repository" / "tiny_llm" / "checkpoint"

BOS = "<|endoftext|>"
EOS = "<|im_end|>"
SPECIAL_TOKENS = [BOS, "<|im_start|>", EOS]
#: ChatML, as many chat models use it: each message framed by <|im_start|>role ... <|im_end|>.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
VOCAB_SIZE = 512
#: Long enough for the tests' longest generation (a stream cancelled mid-way).
CONTEXT = 4096


def up_to_date(out: Path) -> bool:
    marker = out / "model.safetensors"
    if not marker.exists():
        return False
    built = marker.stat().st_mtime
    return built >= Path(__file__).stat().st_mtime and built >= CORPUS.stat().st_mtime


def build(out: Path) -> None:
    """Write the tokenizer and the model into ``out`` (replaced atomically, as a whole folder)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator([CORPUS.read_text(encoding="utf-8")], trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=BOS, eos_token=EOS, pad_token=BOS, model_max_length=CONTEXT
    )
    tokenizer.chat_template = CHAT_TEMPLATE

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=CONTEXT,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)

    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    tokenizer.save_pretrained(partial, save_jinja_files=False)  # the template inside tokenizer_config.json
    model.save_pretrained(partial)
    previous = out.with_name(f".{out.name}.{os.getpid()}.previous")
    if out.exists():
        out.rename(previous)
    partial.rename(out)
    shutil.rmtree(previous, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild an up-to-date checkpoint")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="checkpoint folder to write")
    args = parser.parse_args(argv)
    if not args.force and up_to_date(args.out):
        print(f"{args.out} is up to date")
        return 0
    build(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
