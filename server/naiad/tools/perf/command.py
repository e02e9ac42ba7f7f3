"""``naiad perf``: perf_analyzer's flags (where it has them), its printed report and its CSV.

Exit status: 0 when every request succeeded, 1 when some failed (counted and listed apart, never as
throughput), 2 for a usage error, 3 when the run cannot start (unreachable server, unknown model, inputs
that cannot be built).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the rest loads in run(): `naiad serve` builds this parser too and should not pay for it
    from naiad.tools.perf.session import LoadOptions


def _range(kind: type[int] | type[float], text: str, flag: str) -> tuple[float, float, float]:
    parts = text.split(":")
    try:
        values = [kind(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag} {text}: expected start[:end[:step]]") from None
    if not 1 <= len(values) <= 3 or min(values) < 0:
        raise argparse.ArgumentTypeError(f"{flag} {text}: expected start[:end[:step]], non-negative")
    start = values[0]
    end = values[1] if len(values) > 1 else start
    step = values[2] if len(values) > 2 else 1
    if step <= 0:
        raise argparse.ArgumentTypeError(f"{flag} {text}: step must be positive")
    return start, end, step


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "perf",
        help="measure a model's throughput and latency (perf_analyzer's flags and report)",
        description="A load generator for Triton-compatible servers (Naiad or Triton) with perf_analyzer's "
        "flags, report and CSV columns.",
    )
    p.add_argument("-m", dest="model", required=True, help="model name")
    p.add_argument("-x", dest="version", default="", help="model version (default: the server's choice)")
    p.add_argument("-u", dest="url", help="server address host:port (default localhost:8000, gRPC :8001)")
    p.add_argument("-i", dest="protocol", type=str.lower, choices=["http", "grpc"], default="http")
    p.add_argument("-b", dest="batch", type=_positive, default=1, help="batch size of each request")
    p.add_argument(
        "--concurrency-range", metavar="START:END:STEP", type=lambda t: _range(int, t, "--concurrency-range")
    )
    p.add_argument(
        "--request-rate-range",
        metavar="START:END:STEP",
        type=lambda t: _range(float, t, "--request-rate-range"),
    )
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D1,D2",
        help="shape of a variable-size input (repeatable)",
    )
    p.add_argument("--input-data", default="random", metavar="random|zero|FILE.json")
    p.add_argument("--string-length", type=_positive, default=128)
    p.add_argument("--string-data", default=None)
    p.add_argument("--shared-memory", choices=["none", "system"], default="none")
    p.add_argument("--output-shared-memory-size", type=_positive, default=102400)
    p.add_argument("--input-tensor-format", choices=["binary", "json"], default="binary")
    p.add_argument("--output-tensor-format", choices=["binary", "json"], default="binary")
    p.add_argument("--measurement-interval", "-p", type=_positive, default=5000, metavar="MSEC")
    p.add_argument("--percentile", type=int, choices=range(1, 100), metavar="1-99", default=None)
    p.add_argument("--stability-percentage", "-s", type=float, default=10.0)
    p.add_argument("--max-trials", "-r", type=_positive, default=10)
    p.add_argument("--latency-threshold", "-l", type=_positive, default=None, metavar="MSEC")
    p.add_argument("-f", dest="filename", type=Path, default=None, help="write the results as CSV")
    p.add_argument("--verbose-csv", action="store_true")
    p.add_argument("--streaming", action="store_true", help="gRPC streaming (decoupled models)")
    p.add_argument("--sequence-length", type=_positive, default=None)
    p.add_argument("--sequence-length-variation", type=float, default=20.0)
    p.add_argument("--sequence-id-range", default="1:2147483648", metavar="START:END")
    p.add_argument("--grpc-client", choices=["auto", "grpcio"], default="auto",
                   help="unary gRPC over a bare HTTP/2 client where possible (auto), or always grpcio")
    p.add_argument("-v", dest="verbose", action="store_true", help="also print the client's CPU overhead")
    p.add_argument(
        "--workers",
        type=_positive,
        default=None,
        help="load-generating processes (Naiad extension; default: one per core, at most 4)",
    )


def _levels(start: float, end: float, step: float) -> Iterator[float]:
    value = start
    while end == 0 or value <= end:
        yield value
        value += step


def options_from(args: argparse.Namespace) -> LoadOptions:
    from naiad.tools.perf.inputs import InputDataError, parse_shapes
    from naiad.tools.perf.session import LoadOptions, SetupError

    try:
        first, _, last = args.sequence_id_range.partition(":")
        id_range = (int(first), int(last) if last else 2**31)
    except ValueError:
        raise SetupError(f"--sequence-id-range {args.sequence_id_range}: expected START:END") from None
    try:
        shapes = parse_shapes(args.shape)
    except InputDataError as error:
        raise SetupError(str(error)) from None
    return LoadOptions(
        batch=args.batch,
        data=args.input_data,
        shapes=shapes,
        string_length=args.string_length,
        string_data=args.string_data,
        shared_memory=args.shared_memory,
        output_shared_memory_size=args.output_shared_memory_size,
        binary_inputs=args.input_tensor_format == "binary",
        binary_outputs=args.output_tensor_format == "binary",
        streaming=args.streaming,
        sequence_length=args.sequence_length,
        sequence_length_variation=args.sequence_length_variation,
        sequence_id_range=id_range,
        workers=args.workers,
        grpc_client=args.grpc_client,
    )


def run(args: argparse.Namespace) -> int:
    from naiad.tools.perf.engine import Measurement, MeasureSettings
    from naiad.tools.perf.report import level_text, settings_text, summary_text, write_csv
    from naiad.tools.perf.session import Session, SetupError, Target

    if args.concurrency_range and args.request_rate_range:
        print("error: --concurrency-range and --request-rate-range cannot be used together", file=sys.stderr)
        return 2
    by_rate = args.request_rate_range is not None
    start, end, step = args.request_rate_range if by_rate else (args.concurrency_range or (1, 1, 1))
    if end == 0 and args.latency_threshold is None:
        print("error: an open range (end 0) needs --latency-threshold to stop", file=sys.stderr)
        return 2
    url = args.url or ("localhost:8001" if args.protocol == "grpc" else "localhost:8000")
    settings = MeasureSettings(
        args.measurement_interval, args.stability_percentage, args.max_trials, args.percentile, args.batch
    )
    max_load = int(end or start) if not by_rate else 4
    try:
        options = options_from(args)
        with Session(
            Target(url, args.protocol, args.model, args.version), options, settings, max_load
        ) as session:
            assert session.info is not None
            info = session.info
            print(
                settings_text(
                    args.batch,
                    args.measurement_interval,
                    args.percentile,
                    info,
                    None if by_rate else int(end),
                    end if by_rate else None,
                    args.latency_threshold,
                )
            )
            results: list[Measurement] = []
            for level in _levels(start, end, step):
                measured = (
                    session.profiler.rate(level) if by_rate else session.profiler.concurrency(int(level))
                )
                results.append(measured)
                print(level_text(measured, args.protocol, info, session.profiler.server_stats, args.verbose))
                sys.stdout.flush()
                latency_ms = measured.stabilizing_latency_us / 1000
                if args.latency_threshold is not None and latency_ms > args.latency_threshold:
                    break
            print(summary_text(results, args.percentile))
            if args.filename is not None:
                write_csv(
                    args.filename,
                    results,
                    info,
                    session.profiler.server_stats,
                    args.verbose_csv,
                    args.percentile,
                )
    except SetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 3
    return 1 if any(m.error_count for m in results) else 0
