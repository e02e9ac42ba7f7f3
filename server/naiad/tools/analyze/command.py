"""``naiad analyze``: find each model's best configuration on this machine (Model Analyzer's job).

Exit status: 0 when every model got a configuration within the constraints, 1 when some did not (the
report says why), 2 for a usage error, 3 when the server could not start or a model could not load.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected comma-separated non-negative integers, got '{text}'")
    return values


def _positive_ints(text: str) -> tuple[int, ...]:
    values = _ints(text)
    if min(values) == 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got '{text}'")
    return values


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "analyze",
        help="search a model's configuration for the most throughput within a latency budget",
        description="Starts `naiad serve --model-control-mode explicit`, loads each candidate configuration "
        "through the repository API (a config override: no file is written), measures it over a concurrency "
        "sweep with the `naiad perf` engine, and writes the best config.pbtxt per model, CSVs and "
        "report.html.",
    )
    p.add_argument(
        "--model-repository", dest="repositories", action="append", required=True, type=Path, metavar="PATH"
    )
    p.add_argument("models", nargs="+", metavar="MODEL", help="models to analyze")
    p.add_argument("--output-dir", "-o", type=Path, default=Path("analysis"), metavar="PATH")
    p.add_argument(
        "--mode",
        choices=["quick", "brute"],
        default="quick",
        help="quick: hill-climb from one unbatched instance (default); brute: every candidate",
    )
    p.add_argument("--objective", choices=["throughput", "latency", "memory"], default="throughput")
    p.add_argument("--latency-budget-ms", type=float, default=None, metavar="MS")
    p.add_argument("--latency-metric", choices=["avg", "p50", "p90", "p95", "p99"], default="p99")
    p.add_argument("--min-throughput", type=float, default=None, metavar="INFER_PER_SEC")
    p.add_argument("--max-memory-mb", type=float, default=None, metavar="MIB")
    p.add_argument(
        "--time-budget",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="stop searching after this long (default 600); what was measured is reported",
    )
    p.add_argument("--instance-counts", type=_positive_ints, default=(1, 2, 4), metavar="N,N")
    p.add_argument(
        "--max-batch-sizes",
        type=_positive_ints,
        default=(4, 8, 16, 32),
        metavar="N,N",
        help="tried with dynamic batching (models with a batch dimension)",
    )
    p.add_argument(
        "--max-queue-delays",
        type=_ints,
        default=(0,),
        metavar="US,US",
        help="dynamic batching max_queue_delay_microseconds values",
    )
    p.add_argument(
        "--preferred-batch-size",
        action="store_true",
        help="also try preferred_batch_size equal to max_batch_size",
    )
    p.add_argument("--kinds", default="cpu", metavar="cpu[,gpu]", help="instance kinds (gpu needs a GPU)")
    p.add_argument(
        "--concurrency",
        type=_positive_ints,
        default=(1, 2, 4, 8, 16, 32),
        metavar="N,N",
        help="concurrency levels of each sweep (a sweep stops early at a plateau or the budget)",
    )
    p.add_argument("-i", dest="protocol", type=str.lower, choices=["http", "grpc"], default="http")
    p.add_argument("--measurement-interval", "-p", type=int, default=1000, metavar="MSEC")
    p.add_argument("--stability-percentage", "-s", type=float, default=10.0)
    p.add_argument("--max-trials", "-r", type=int, default=5)
    p.add_argument("--workers", type=int, default=None, help="load-generating processes")
    p.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra `naiad serve` flag, e.g. --server-arg=--log-verbose=1 (repeatable)",
    )


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(f"KIND_{k.strip().upper()}" for k in text.split(",") if k.strip())
    for kind in kinds:
        if kind not in ("KIND_CPU", "KIND_GPU"):
            raise ValueError(f"--kinds {text}: expected cpu and/or gpu")
    if "KIND_GPU" in kinds and shutil.which("nvidia-smi") is None:
        raise ValueError("--kinds gpu: no GPU on this machine (nvidia-smi not found)")
    return kinds


def run(args: argparse.Namespace) -> int:
    try:
        import rich  # noqa: F401
    except ImportError:
        print("error: naiad analyze needs rich: pip install 'naiad[tools]'", file=sys.stderr)
        return 2
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from naiad.tools.analyze.report import write_all
    from naiad.tools.analyze.results import Objectives, latency_ms
    from naiad.tools.analyze.runner import Analyzer, SweepOptions
    from naiad.tools.analyze.server import ServerUnderTest
    from naiad.tools.analyze.space import SearchSpace
    from naiad.tools.perf.control import ControlError
    from naiad.tools.perf.engine import MeasureSettings
    from naiad.tools.perf.session import SetupError

    console = Console(stderr=True)
    try:
        kinds = _kinds(args.kinds)
    except ValueError as error:
        console.print(f"error: {error}")
        return 2
    objectives = Objectives(
        args.objective, args.latency_budget_ms, args.latency_metric, args.min_throughput, args.max_memory_mb
    )
    space = SearchSpace(
        args.instance_counts, kinds, args.max_batch_sizes, args.max_queue_delays, args.preferred_batch_size
    )
    settings = MeasureSettings(args.measurement_interval, args.stability_percentage, max(3, args.max_trials))
    sweep = SweepOptions(tuple(sorted(set(args.concurrency))), args.protocol, args.workers)
    out: Path = args.output_dir
    started = time.monotonic()
    deadline = started + args.time_budget
    measured = {}
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[spent]}"),
        TimeElapsedColumn(),
    )
    try:
        with (
            ServerUnderTest(args.repositories, args.server_arg, log_dir=out) as server,
            Progress(*columns, console=console, transient=False) as progress,
        ):
            task = progress.add_task("starting", total=args.time_budget, spent="")

            def report(message: str) -> None:
                spent = min(args.time_budget, time.monotonic() - started)
                progress.update(
                    task, description=message, completed=spent, spent=f"{spent:.0f}/{args.time_budget:.0f}s"
                )

            analyzer = Analyzer(server, space, objectives, sweep, settings, deadline, args.mode, report)
            try:
                for model in args.models:
                    measured[model] = analyzer.model(model)
            finally:
                analyzer.close()
            report("done")
    except (RuntimeError, ControlError, SetupError) as error:
        console.print(f"error: {error}")
        if not measured:
            return 3
    context = (
        f"Search: {args.mode}; {sum(map(len, measured.values()))} candidates measured in "
        f"{time.monotonic() - started:.0f} s over {args.protocol.upper()}."
    )
    ranked = write_all(out, measured, objectives, context)
    table_console = Console() if sys.stdout.isatty() else Console(width=120)
    failed = False
    for model, results in ranked.items():
        table = Table(title=f"{model}: candidates, best first")
        for column in (
            "#",
            "candidate",
            "concurrency",
            "infer/s",
            f"{args.latency_metric} ms",
            "peak RSS MiB",
            "status",
        ):
            table.add_column(column, justify="left" if column in ("candidate", "status") else "right")
        for index, result in enumerate(results, 1):
            best = result.best_point()
            table.add_row(
                str(index),
                result.candidate.label(),
                str(best.concurrency) if best else "-",
                f"{best.throughput:,.0f}" if best else "-",
                f"{latency_ms(best, args.latency_metric):.2f}" if best else "-",
                f"{result.memory_mb:,.0f}",
                result.reason() or "ok",
                style="bold green" if index == 1 and result.feasible else None,
            )
        table_console.print(table)
        if results and results[0].feasible:
            print(f"best config for {model}: {out / model / 'config.pbtxt'}")
        else:
            failed = True
            print(f"{model}: no candidate met the constraints")
    print(f"report: {out / 'report.html'}")
    sys.stdout.flush()
    return 1 if failed or len(ranked) < len(args.models) else 0
