"""Token streaming through the OpenAI frontend: time to first token and inter-token latency, and our
overhead on each, with the model's own time taken out.

A server runs the text-generation example (``examples/llm``, the tiny checkpoint) with the OpenAI
port on, and with the model's ``timing_log`` set: for every request the model writes when it started
on it, when it sent each token and how long each token's forward pass and sampling took, on the
machine's monotonic clock (the one ``time.monotonic_ns`` reads in every process).  Clients stream
``POST /v1/completions`` over raw keep-alive connections (asyncio; an SSE parser of a few lines, so the
client's own cost stays small) at 1, 8 and 32 concurrent streams, and stamp each token's chunk as it
arrives.  Joined by the completion ID (the request ID the model sees), that gives per request:

* TTFT: first token chunk received - request sent;
* first-token overhead: TTFT - (model's first send - model's start): everything before the model
  starts on the request (HTTP, codec, data plane, queue, dispatch) and the first token's delivery;
* to model: model's start - request sent, the first part of that alone (what a wave of requests
  waits to reach the model instance);
* ITL: gap between two token chunks at the client, beside the model's own gap between sending them
  (with N streams the model makes one token of each in turn, so that gap is about N forward passes)
  and its compute per token (one forward pass and the sampling);
* per-token overhead: token chunk received - model sent that token: the sink, the event loop, the
  codec, uvicorn and the socket, and the client's parse, per token, queueing included.

Every client sends its first request at the same moment: that *opening wave* (N requests in the same
millisecond) is reported apart, as the first-token overhead of a burst; the other figures are over the
requests after it, when the N streams run side by side as they do in service (the requests of one wave
end within a model step of each other, so later waves arrive spread over it).  Before the sixth session
both were pooled, and with 64 requests at 32 streams the p50 fell on the opening wave's half.

Wall-clock figures follow whatever else runs on the machine; so beside them each level reports the CPU
time our processes spent per token streamed (``/proc/<pid>/stat`` utime + stime over the level, divided
by the tokens the clients received): the server process, its model processes (the example's, the
template's), and the benchmark's clients.  Those hold under load, and they count a request's setup
spread over its tokens.

Prints p50/p99 of each per concurrency, the median over ``--rounds`` rounds; ``--json FILE`` writes
them.

usage: python benchmarks/llm/run.py [--tokens 64] [--requests 128] [--concurrency 1,8,32] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.frontends.openai.conftest import LLM_REPOSITORY, MODEL, build_checkpoint
from tests.support.server import ServerProcess, free_port

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")

PROMPT = "The river begins as a thin line of cold water under the moss"


@dataclass(slots=True)
class Stream:
    """One request as the client saw it."""

    sent: int
    id: str = ""
    tokens: list[int] = field(default_factory=list)
    #: A client's first request: every client sends it at the same moment (the opening wave).
    opening: bool = False


async def _read_chunk(reader: asyncio.StreamReader) -> bytes:
    """One chunk of a chunked HTTP body (b"" at its end)."""
    size = int((await reader.readline()).strip(), 16)
    data = await reader.readexactly(size + 2)
    return data[:-2]


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> Stream:
    head = (
        f"POST /v1/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    stream = Stream(time.monotonic_ns())
    writer.write(head + body)
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"server answered {status!r}")
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    buffered = b""
    while True:
        chunk = await _read_chunk(reader)
        if not chunk:
            return stream
        buffered += chunk
        while b"\n\n" in buffered:
            event, buffered = buffered.split(b"\n\n", 1)
            now = time.monotonic_ns()
            data = event[len(b"data: ") :]
            if data == b"[DONE]":
                continue
            document = orjson.loads(data)
            stream.id = document["id"]
            choice = document["choices"][0]
            if choice["finish_reason"] is None:
                stream.tokens.append(now)


async def _client(port: int, count: int, body: bytes, out: list[Stream]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for index in range(count):
            stream = await _request(reader, writer, body)
            stream.opening = index == 0
            out.append(stream)
    finally:
        writer.close()


async def _drive(port: int, concurrency: int, requests: int, tokens: int) -> list[Stream]:
    body = orjson.dumps(
        {"model": MODEL, "prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "stream": True}
    )
    out: list[Stream] = []
    each = max(1, requests // concurrency)
    await asyncio.gather(*(_client(port, each, body, out) for _ in range(concurrency)))
    return out


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _analyse(streams: list[Stream], records: dict[str, dict[str, Any]]) -> dict[str, float]:
    ttft, first_overhead, itl, compute, overhead, model_ttft, model_itl = [], [], [], [], [], [], []
    to_model = []
    skipped = 0
    for stream in streams:
        record = records.get(stream.id)
        if record is None or len(record["computed"]) != len(stream.tokens) or not stream.tokens:
            skipped += 1
            continue
        sent = record["sent"]
        ttft.append(stream.tokens[0] - stream.sent)
        model_ttft.append(sent[0] - record["started"])
        first_overhead.append(ttft[-1] - model_ttft[-1])
        to_model.append(record["started"] - stream.sent)
        itl += [b - a for a, b in pairwise(stream.tokens)]
        model_itl += [b - a for a, b in pairwise(sent[: len(stream.tokens)])]
        compute += record["computed"][1:]
        overhead += [got - made for got, made in zip(stream.tokens, sent, strict=False)]
    ms = 1e-6
    figures: dict[str, float] = {
        "requests": len(streams) - skipped,
        "skipped": skipped,
        "ttft_p50_ms": _pct(ttft, 0.5) * ms,
        "ttft_p99_ms": _pct(ttft, 0.99) * ms,
        "model_first_token_p50_ms": _pct(model_ttft, 0.5) * ms,
        "first_token_overhead_p50_ms": _pct(first_overhead, 0.5) * ms,
        "first_token_overhead_p99_ms": _pct(first_overhead, 0.99) * ms,
        "to_model_p50_ms": _pct(to_model, 0.5) * ms,
        "to_model_p99_ms": _pct(to_model, 0.99) * ms,
        "itl_p50_ms": _pct(itl, 0.5) * ms,
        "itl_p99_ms": _pct(itl, 0.99) * ms,
        "model_itl_p50_ms": _pct(model_itl, 0.5) * ms,
        "model_itl_p99_ms": _pct(model_itl, 0.99) * ms,
        "model_compute_per_token_p50_ms": _pct(compute, 0.5) * ms,
        "model_compute_per_token_p99_ms": _pct(compute, 0.99) * ms,
        "token_overhead_p50_ms": _pct(overhead, 0.5) * ms,
        "token_overhead_p99_ms": _pct(overhead, 0.99) * ms,
    }
    return figures


def _cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (all its threads), 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * _TICK_S


def _descendants(root: int) -> list[int]:
    """The processes under ``root`` (its model processes and their template)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _cpu(server: int) -> tuple[float, float, float]:
    """CPU seconds so far of the server process, its model processes, and this (client) process."""
    models = sum(_cpu_seconds(pid) for pid in _descendants(server))
    return _cpu_seconds(server), models, _cpu_seconds(os.getpid())


def _repository(into: Path, timing_log: Path, checkpoint: Path) -> Path:
    """A copy of the example repository whose model logs its timings (the checkpoint is linked)."""
    repository = into / "models"
    shutil.copytree(LLM_REPOSITORY, repository, ignore=shutil.ignore_patterns("checkpoint", "__pycache__"))
    model = repository / MODEL
    config = (model / "config.pbtxt").read_text()
    config = re.sub(
        r'key: "checkpoint" value \{ string_value: "[^"]*" \}',
        f'key: "checkpoint" value {{ string_value: "{checkpoint}" }}',
        config,
    )
    config += f'parameters {{ key: "timing_log" value {{ string_value: "{timing_log}" }} }}\n'
    (model / "config.pbtxt").write_text(config)
    return repository


def _records(timing_log: Path) -> dict[str, dict[str, Any]]:
    records = {}
    text = timing_log.read_text()
    for line in text[: text.rfind("\n") + 1].splitlines():  # not a line the model is still writing
        record = json.loads(line)
        records[record["id"]] = record
    return records


#: The CPU-time figures, in the order :func:`_cpu` returns them.
_CPU_KEYS = ("server_cpu_per_token_ms", "model_cpu_per_token_ms", "client_cpu_per_token_ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=64, help="max_tokens of each request")
    parser.add_argument("--requests", type=int, default=128, help="requests per concurrency level")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=3, help="report the median of this many rounds")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    checkpoint = build_checkpoint()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="naiad-llm-bench-") as scratch:
        timing_log = Path(scratch) / "timing.jsonl"
        repository = _repository(Path(scratch), timing_log, checkpoint)
        port = free_port()
        with ServerProcess([repository], [f"--openai-port={port}"]) as server:
            assert server.process is not None
            pid = server.process.pid
            asyncio.run(_drive(port, 4, 8, args.tokens))  # warm-up
            rounds: dict[str, list[dict[str, float]]] = {}
            for _ in range(args.rounds):  # levels in turn within each round, so load drifts hit all
                for concurrency in (int(c) for c in args.concurrency.split(",")):
                    done = len(_records(timing_log)) if timing_log.exists() else 0
                    count = max(args.requests, concurrency)
                    before = _cpu(pid)
                    streams = asyncio.run(_drive(port, concurrency, count, args.tokens))
                    after = _cpu(pid)
                    deadline = time.monotonic() + 10
                    while len(_records(timing_log)) < done + len(streams) and time.monotonic() < deadline:
                        time.sleep(0.05)
                    records = _records(timing_log)
                    steady = [stream for stream in streams if not stream.opening] or streams
                    figures = _analyse(steady, records)
                    burst = _analyse([stream for stream in streams if stream.opening], records)
                    figures["opening_overhead_p50_ms"] = burst["first_token_overhead_p50_ms"]
                    figures["opening_overhead_p99_ms"] = burst["first_token_overhead_p99_ms"]
                    tokens = sum(len(stream.tokens) for stream in streams) or 1
                    for key, start, end in zip(_CPU_KEYS, before, after, strict=True):
                        figures[key] = (end - start) / tokens * 1e3
                    rounds.setdefault(str(concurrency), []).append(figures)
            for level, figures in rounds.items():
                results[level] = {key: statistics.median(f[key] for f in figures) for key in figures[0]}
    load = os.getloadavg()
    print(f"load average before the report: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    columns = [
        ("ttft_p50_ms", "TTFT p50"),
        ("ttft_p99_ms", "TTFT p99"),
        ("first_token_overhead_p50_ms", "1st-token overhead p50"),
        ("first_token_overhead_p99_ms", "p99"),
        ("to_model_p50_ms", "to model p50"),
        ("to_model_p99_ms", "p99"),
        ("itl_p50_ms", "ITL p50"),
        ("itl_p99_ms", "ITL p99"),
        ("model_itl_p50_ms", "model ITL p50"),
        ("model_compute_per_token_p50_ms", "model compute/token p50"),
        ("token_overhead_p50_ms", "overhead/token p50"),
        ("token_overhead_p99_ms", "p99"),
        ("opening_overhead_p50_ms", "opening wave: 1st-token overhead p50"),
        ("opening_overhead_p99_ms", "p99"),
    ]
    print("streams | " + " | ".join(title for _, title in columns) + " | requests")
    for concurrency, figures in results.items():
        cells = " | ".join(f"{figures[key]:.3f}" for key, _ in columns)
        print(f"{concurrency} | {cells} | {figures['requests']:.0f}")
    print("streams | CPU ms/token: server | model processes | clients")
    for concurrency, figures in results.items():
        print(f"{concurrency} | " + " | ".join(f"{figures[key]:.3f}" for key in _CPU_KEYS))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
