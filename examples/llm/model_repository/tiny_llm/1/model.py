"""Text generation with a Hugging Face causal LM, streamed one token per response (decoupled).

Request:  ``text_input`` (the prompt, one string) and request parameters ``max_tokens``,
          ``temperature`` (0 = greedy), ``top_p``, ``seed``, ``stop`` (one string, or a JSON list of
          strings), ``stream`` (false: one response with the whole text, as Triton's ``generate``
          endpoint needs) and ``add_special_tokens`` (false for a prompt that has them already, as
          one rendered from the chat template does).  Missing parameters take OpenAI's defaults
          (temperature 1, top_p 1), the config's ``default_max_tokens``, ``stream`` true and
          ``add_special_tokens`` true.
Response: one per generated token with ``text_output`` (the text that token completes: "" while it
          ends inside a UTF-8 character or may be the start of a stop string), then a last response,
          sent with the final flag: the text still held back, ``finish_reason`` ("stop": end of text
          or a stop string, "length": max_tokens or the context is used up, "cancelled"),
          ``num_input_tokens`` and ``num_output_tokens``.  A stop string ends the text before it and
          is never sent.

``execute`` hands requests to one generation thread and returns: that thread makes one token of each
active request in turn, so one instance streams many requests at once, and a request whose client
has gone (``request.is_cancelled()``) stops at its next token.

Config parameters: ``checkpoint`` (a Hugging Face model folder; relative paths are relative to the
model's folder), ``default_max_tokens``, ``torch_threads``, and ``timing_log`` (a file: when set, the
model appends one line per request with the monotonic time each token was sent and the time its
forward pass and sampling took; ``benchmarks/llm`` reads it).
"""

import json
import queue
import threading
import time
from pathlib import Path

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as transformers_logging

_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        checkpoint = Path(parameters["checkpoint"])
        if not checkpoint.is_absolute():
            checkpoint = Path(args["model_repository"]) / checkpoint
        torch.set_num_threads(int(parameters.get("torch_threads", "1")))
        transformers_logging.disable_progress_bar()
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
        self.context = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.default_max_tokens = int(parameters.get("default_max_tokens", "16"))
        # Chat models often end a turn with a token of their own (Llama 3's <|eot_id|>), listed in the
        # generation config beside the tokenizer's end-of-text token.
        self.eos = set()
        for ids in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            self.eos.update([ids] if isinstance(ids, int) else ids or [])
        timing_log = parameters.get("timing_log", "")
        self.timing_log = open(timing_log, "a", encoding="utf-8") if timing_log else None
        self.arrivals = queue.SimpleQueue()
        self.worker = threading.Thread(target=self.generate, name="generate", daemon=True)
        self.worker.start()

    def execute(self, requests):
        for request in requests:
            self.arrivals.put((request, time.monotonic_ns()))
        return None

    def generate(self):
        """The generation loop: one token of every active request in turn, new requests joining as
        they arrive (one thread, so the server's event loop never waits behind many).  Unloading
        (``finalize``) lets the requests under way finish."""
        active, stopping = [], False
        while active or not stopping:
            arrivals = [] if active else [self.arrivals.get()]
            while not self.arrivals.empty():
                arrivals.append(self.arrivals.get())
            for arrival in arrivals:
                if arrival is None:
                    stopping = True
                    continue
                generation = self.start(*arrival)
                if generation is not None:
                    active.append(generation)
            active = [generation for generation in active if self.advance(generation)]

    @staticmethod
    def advance(generation):
        """One step of ``generation``; a failure ends only that request, with the error."""
        try:
            return generation.step()
        except Exception as exc:
            error = pb_utils.TritonError(f"generation failed: {type(exc).__name__}: {exc}")
            generation.sender.send(pb_utils.InferenceResponse(error=error), flags=_FINAL)
            return False

    def start(self, request, arrived):
        sender = request.get_response_sender()
        try:
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0]
            prompt = prompt.decode("utf-8") if isinstance(prompt, bytes) else str(prompt)
            parameters = json.loads(request.parameters())
            sampling = Sampling(parameters, self.default_max_tokens)
            streaming = parameters.get("stream", True)
            if not isinstance(streaming, bool):
                raise ValueError("parameter 'stream' must be a boolean")
            special = parameters.get("add_special_tokens", True)  # false: a prompt from a chat template
            if not isinstance(special, bool):
                raise ValueError("parameter 'add_special_tokens' must be a boolean")
            ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=special).input_ids
            if ids.shape[1] == 0:
                raise ValueError("the prompt is empty")
            if ids.shape[1] >= self.context:
                raise ValueError(
                    f"the prompt has {ids.shape[1]} tokens; this model's context is {self.context} tokens"
                )
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
            sender.send(pb_utils.InferenceResponse(error=error), flags=_FINAL)
            return None
        return Generation(self, request, sender, sampling, streaming, ids, arrived)

    def finalize(self):
        self.arrivals.put(None)
        self.worker.join()
        if self.timing_log is not None:
            self.timing_log.close()


class Generation:
    """One request being generated: its KV cache, its text so far, and its next step."""

    def __init__(self, model, request, sender, sampling, streaming, ids, arrived):
        self.model, self.request, self.sender = model, request, sender
        self.sampling, self.streaming = sampling, streaming
        self.prompt_tokens = ids.shape[1]
        self.limit = min(sampling.max_tokens, model.context - self.prompt_tokens)
        self.text = Text(model.tokenizer, sampling.stop)
        self.generator = torch.Generator().manual_seed(sampling.seed) if sampling.seed is not None else None
        self.cache, self.step_input, self.count = None, ids, 0
        self.arrived, self.sent, self.computed, self.held = arrived, [], [], []

    def step(self):
        """Generate one token and send it; False once the request is finished (final flag sent)."""
        if self.request.is_cancelled():
            name = self.request.request_id()
            pb_utils.Logger.log_info(f"request '{name}' cancelled after {self.count} tokens")
            return self.finish("cancelled")
        begin = time.monotonic_ns()
        with torch.inference_mode():
            output = self.model.model(self.step_input, cache=self.cache, use_cache=True)
        self.cache = output.cache
        token = self.sampling.pick(output.logits[0, -1], self.generator)
        self.count += 1
        if token in self.model.eos:
            return self.finish("stop")
        piece = self.text.add(token)
        self.computed.append(time.monotonic_ns() - begin)
        if self.text.stopped:
            return self.finish("stop")
        if self.streaming:
            self.sender.send(pb_utils.InferenceResponse([_text_tensor(piece)]))
            self.sent.append(time.monotonic_ns())
        else:
            self.held.append(piece)
        if self.count >= self.limit:
            return self.finish("length")
        self.step_input = torch.tensor([[token]])
        return True

    def finish(self, reason):
        text = self.text
        rest = "".join(self.held) + (text.pending_before_stop() if reason == "stop" else text.flush())
        final = [
            _text_tensor(rest),
            pb_utils.Tensor("finish_reason", np.array([reason.encode()], dtype=np.object_)),
            pb_utils.Tensor("num_input_tokens", np.array([self.prompt_tokens], dtype=np.int32)),
            pb_utils.Tensor("num_output_tokens", np.array([self.count], dtype=np.int32)),
        ]
        self.sender.send(pb_utils.InferenceResponse(final), flags=_FINAL)
        self.sent.append(time.monotonic_ns())
        log = self.model.timing_log
        if log is not None:
            record = {"id": self.request.request_id(), "started": self.arrived, "sent": self.sent}
            log.write(json.dumps({**record, "computed": self.computed}) + "\n")
            log.flush()
        return False


def _text_tensor(text):
    return pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_))


class Sampling:
    """The sampling parameters of one request, checked, and the choice of each next token."""

    def __init__(self, parameters, default_max_tokens):
        self.max_tokens = _number(parameters, "max_tokens", int, default_max_tokens, low=1)
        self.temperature = _number(parameters, "temperature", float, 1.0, low=0.0, high=2.0)
        self.top_p = _number(parameters, "top_p", float, 1.0, low=0.0, high=1.0)
        seed = parameters.get("seed")
        self.seed = None if seed is None else _number(parameters, "seed", int, 0, low=0)
        self.stop = _stop_strings(parameters.get("stop"))

    def pick(self, logits, generator):
        if self.temperature == 0.0 or self.top_p == 0.0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            ordered, order = torch.sort(probs, descending=True)
            outside = torch.cumsum(ordered, dim=-1) - ordered >= self.top_p
            ordered[outside] = 0.0
            return int(order[torch.multinomial(ordered, 1, generator=generator)])
        return int(torch.multinomial(probs, 1, generator=generator))


def _number(parameters, name, kind, default, low=None, high=None):
    value = parameters.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and value != int(value)):
        raise ValueError(f"parameter '{name}' must be a{'n integer' if kind is int else ' number'}")
    value = kind(value)
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"parameter '{name}' must be {bounds}, got {value}")
    return value


def _stop_strings(value):
    if value is None or value == "":
        return []
    if isinstance(value, str) and value.startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [value]
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise ValueError("parameter 'stop' must be a string or a JSON list of non-empty strings")
    return stops


class Text:
    """The generated text, decoded token by token.

    A token may end inside a UTF-8 character (byte-level tokenizers), so its text is known only with
    the tokens after it: pieces are cut from the decoded text of a short window of recent tokens once it
    no longer ends in a replacement character.  Text that could be the start of a stop string is held
    back until it is known not to be one.
    """

    def __init__(self, tokenizer, stop):
        self.tokenizer = tokenizer
        self.stop = stop
        self.tokens = []
        self.prefix = 0  # the window's first token: decoded with the new ones for context
        self.read = 0  # tokens before this one have their text in self.text
        self.text = ""
        self.sent = 0  # characters of self.text already sent
        self.stopped = False
        self.stop_at = None

    def add(self, token):
        """Add a token; the text that can be sent now ("" if none)."""
        self.tokens.append(token)
        decode = self.tokenizer.decode
        before = decode(self.tokens[self.prefix : self.read], skip_special_tokens=True)
        after = decode(self.tokens[self.prefix :], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.text += after[len(before) :]
            self.prefix, self.read = self.read, len(self.tokens)
        return self._release()

    def _release(self):
        ready = len(self.text)
        for stop in self.stop:
            found = self.text.find(stop, max(0, self.sent - len(stop) + 1))
            if found >= 0 and (self.stop_at is None or found < self.stop_at):
                self.stop_at = found
        if self.stop_at is not None:
            self.stopped = True
            return ""
        for stop in self.stop:  # hold back a tail that may grow into a stop string
            for length in range(min(len(stop) - 1, len(self.text) - self.sent), 0, -1):
                if self.text.endswith(stop[:length]):
                    ready = min(ready, len(self.text) - length)
                    break
        piece = self.text[self.sent : ready]
        self.sent = ready
        return piece

    def pending_before_stop(self):
        """What is left to send when generation ended on a stop (string or end of text)."""
        end = self.stop_at if self.stop_at is not None else len(self.text)
        piece = self.text[self.sent : max(end, self.sent)]
        self.sent = len(self.text)
        return piece

    def flush(self):
        """Everything not sent yet (generation ended without a stop)."""
        piece = self.text[self.sent :]
        self.sent = len(self.text)
        return piece
