"""What ``naiad analyze`` writes: the best ``config.pbtxt`` per model, two CSVs and ``report.html``.

The report is one self-contained file (inline CSS and SVG, no script, nothing fetched), so it can be
mailed or attached to a ticket and opened anywhere.
"""

from __future__ import annotations

import csv
import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from naiad.tools.analyze.results import CandidateResult, Objectives, latency_ms, rank
from naiad.tools.perf.engine import PERCENTILES

PALETTE = (
    "#2563eb",
    "#dc2626",
    "#16a34a",
    "#9333ea",
    "#ea580c",
    "#0891b2",
    "#be185d",
    "#4d7c0f",
    "#7c3aed",
    "#b45309",
    "#0f766e",
    "#64748b",
)


def pbtxt(config: dict[str, Any]) -> str:
    """A config (JSON form) as ``config.pbtxt`` text, through Triton's own ModelConfig message."""
    message = json_format.ParseDict(config, model_config_pb2.ModelConfig(), ignore_unknown_fields=True)
    text: str = text_format.MessageToString(message)
    return text


def write_best_configs(out: Path, ranked: dict[str, list[CandidateResult]]) -> dict[str, Path]:
    written = {}
    for model, results in ranked.items():
        if results and results[0].feasible:
            folder = out / model
            folder.mkdir(parents=True, exist_ok=True)
            best = results[0]
            (folder / "config.pbtxt").write_text(pbtxt(best.file_config or best.config))
            written[model] = folder / "config.pbtxt"
    return written


def _candidate_columns(result: CandidateResult) -> list[object]:
    c = result.candidate
    return [
        result.model,
        c.label(),
        c.instances,
        c.kind,
        c.dynamic_batching,
        c.max_batch_size,
        c.max_queue_delay_us,
        " ".join(map(str, c.preferred_batch_sizes)),
    ]


def _gpu_mib(result: CandidateResult) -> str:
    """Empty where GPU memory was not measured (no GPU, or no NVML)."""
    return "" if result.gpu_memory_bytes is None else f"{result.gpu_memory_bytes / 2**20:.1f}"


_CANDIDATE_HEADER = [
    "Model",
    "Candidate",
    "Instances",
    "Kind",
    "Dynamic Batching",
    "Max Batch Size",
    "Max Queue Delay (us)",
    "Preferred Batch Sizes",
]


def write_csvs(out: Path, ranked: dict[str, list[CandidateResult]], objectives: Objectives) -> None:
    metric = objectives.latency_metric
    with (out / "candidates.csv").open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(
            [
                "Rank",
                *_CANDIDATE_HEADER,
                "Feasible",
                "Best Concurrency",
                "Inferences/Second",
                f"{metric} latency (ms)",
                "Peak RSS (MiB)",
                "Peak GPU memory (MiB)",
                "Reason",
            ]
        )
        for results in ranked.values():
            for index, result in enumerate(results, 1):
                best = result.best_point()
                writer.writerow(
                    [
                        index,
                        *_candidate_columns(result),
                        result.feasible,
                        best.concurrency if best else "",
                        f"{best.throughput:.1f}" if best else "",
                        f"{latency_ms(best, metric):.3f}" if best else "",
                        f"{result.memory_mb:.1f}",
                        _gpu_mib(result),
                        result.reason(),
                    ]
                )
    with (out / "measurements.csv").open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(
            [
                *_CANDIDATE_HEADER,
                "Concurrency",
                "Inferences/Second",
                "Avg latency (us)",
                *(f"p{p} latency (us)" for p in PERCENTILES),
                "Errors",
                "Server Queue (us)",
                "Server Compute Infer (us)",
                "Stable",
                "Within constraints",
            ]
        )
        for results in ranked.values():
            for result in results:
                for point in result.points:
                    writer.writerow(
                        [
                            *_candidate_columns(result),
                            point.concurrency,
                            f"{point.throughput:.1f}",
                            int(point.avg_latency_us),
                            *(int(point.percentiles_us[p]) for p in PERCENTILES),
                            point.error_count,
                            int(point.server.average_us("queue")),
                            int(point.server.average_us("compute_infer")),
                            point.stable,
                            objectives.point_feasible(point),
                        ]
                    )


# ---- charts ----------------------------------------------------------------------------------------------


def _ticks(high: float, count: int = 5) -> list[float]:
    if high <= 0:
        return [0.0, 1.0]
    raw = high / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(math.ceil(high / step) + 1)]


def _fmt(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


Series = tuple[str, str, list[tuple[float, float]]]  # label, colour, points


def line_chart(
    title: str,
    x_label: str,
    y_label: str,
    series: Sequence[Series],
    log2_x: bool = False,
    x_marker: tuple[float, str] | None = None,
) -> str:
    """An SVG line chart with axes, grid, a legend and an optional vertical marker (the latency budget)."""
    width, height, left, right, top, bottom = 720, 360, 64, 210, 34, 48
    plot_w, plot_h = width - left - right, height - top - bottom
    xs = [x for _, _, pts in series for x, _ in pts] or [1.0]
    ys = [y for _, _, pts in series for _, y in pts] or [1.0]
    if x_marker is not None:
        xs.append(x_marker[0])
    if log2_x:
        xs.append(2.0)  # at least one doubling, so a single point does not sit on a zero-width axis

    def fx(value: float) -> float:
        if log2_x:
            span = math.log2(max(xs)) or 1.0
            return left + plot_w * (math.log2(value) / span if value > 0 else 0)
        return left + plot_w * value / (x_ticks[-1] or 1)

    y_ticks = _ticks(max(ys) * 1.05)
    if log2_x:
        top_x = max(xs)
        x_ticks = [2.0**i for i in range(int(math.log2(top_x)) + 1)] if top_x >= 1 else [1.0]
    else:
        x_ticks = _ticks(max(xs) * 1.05)

    def fy(value: float) -> float:
        return top + plot_h * (1 - value / (y_ticks[-1] or 1))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{html.escape(title)}">',
        f'<text x="{left}" y="20" class="title">{html.escape(title)}</text>',
    ]
    for tick in y_ticks:
        y = fy(tick)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" class="grid"/>')
        parts.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{_fmt(tick)}</text>'
        )
    for tick in x_ticks:
        x = fx(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" class="grid"/>')
        parts.append(
            f'<text x="{x:.1f}" y="{top + plot_h + 16}" class="tick" text-anchor="middle">{_fmt(tick)}</text>'
        )
    parts.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="frame"/>')
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{height - 8}" class="label" text-anchor="middle">'
        f"{html.escape(x_label)}</text>"
    )
    parts.append(
        f'<text transform="translate(16 {top + plot_h / 2}) rotate(-90)" class="label" '
        f'text-anchor="middle">{html.escape(y_label)}</text>'
    )
    if x_marker is not None:
        x = fx(x_marker[0])
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" class="budget"/>')
        parts.append(
            f'<text x="{x + 4:.1f}" y="{top + 12}" class="budget-label">{html.escape(x_marker[1])}</text>'
        )
    for index, (label, colour, points) in enumerate(series):
        coords = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in points)
        if len(points) > 1:
            parts.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in points:
            parts.append(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="3.2" fill="{colour}"/>')
        ly = top + 6 + index * 18
        parts.append(f'<rect x="{left + plot_w + 14}" y="{ly}" width="12" height="12" fill="{colour}"/>')
        parts.append(
            f'<text x="{left + plot_w + 32}" y="{ly + 10}" class="legend">{html.escape(label)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


# ---- HTML --------------------------------------------------------------------------------------------------

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #111827; margin: 2rem auto;
       max-width: 1000px; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2.4rem; border-bottom: 1px solid #e5e7eb; }
.meta { color: #4b5563; } .winner { background: #ecfdf5; border: 1px solid #a7f3d0; padding: .8rem 1rem;
       border-radius: 6px; } .none { background: #fef2f2; border: 1px solid #fecaca; padding: .8rem 1rem;
       border-radius: 6px; }
table { border-collapse: collapse; width: 100%; margin: 1rem 0; font-size: 13px; }
th, td { border-bottom: 1px solid #e5e7eb; padding: .35rem .5rem; text-align: right; }
th:nth-child(2), td:nth-child(2), th:last-child, td.reason { text-align: left; }
tr.best td { font-weight: 600; background: #f0fdf4; }
tr.out td { color: #9ca3af; }
pre { background: #f9fafb; border: 1px solid #e5e7eb; padding: .8rem; overflow-x: auto; }
svg { display: block; margin: 1rem 0; } .title { font-weight: 600; font-size: 14px; }
.tick { font-size: 11px; fill: #4b5563; } .label { font-size: 12px; fill: #111827; }
.legend { font-size: 11px; fill: #111827; } .grid { stroke: #e5e7eb; } .frame { fill: none; stroke: #9ca3af; }
.budget { stroke: #dc2626; stroke-dasharray: 5 4; stroke-width: 1.5; }
.budget-label { font-size: 11px; fill: #dc2626; }
"""


def _model_section(model: str, results: list[CandidateResult], objectives: Objectives) -> str:
    metric = objectives.latency_metric
    parts = [f"<h2>{html.escape(model)}</h2>"]
    winner = results[0] if results and results[0].feasible else None
    baseline = next(
        (r for r in results if r.candidate.instances == 1 and not r.candidate.dynamic_batching), None
    )
    if winner is not None:
        best = winner.best_point()
        assert best is not None
        line = (
            f"Best: <b>{html.escape(winner.candidate.label())}</b>: {best.throughput:,.0f} infer/s at "
            f"concurrency {best.concurrency}, {metric} {latency_ms(best, metric):.2f} ms, peak RSS "
            f"{winner.memory_mb:,.0f} MiB."
        )
        if baseline is not None and baseline is not winner and baseline.best_point() is not None:
            base_best = baseline.best_point()
            assert base_best is not None
            gain = best.throughput / base_best.throughput
            line += f" {gain:.2f}x the throughput of one instance without batching."
        parts.append(f'<p class="winner">{line}</p>')
    else:
        parts.append('<p class="none">No candidate met the constraints; no config.pbtxt was written.</p>')
    parts.append(
        f"<table><tr><th>#</th><th>Candidate</th><th>Concurrency</th><th>Infer/s</th><th>{metric} ms</th>"
        "<th>Peak RSS MiB</th><th>Peak GPU MiB</th><th>Points</th><th>Status</th></tr>"
    )
    for index, result in enumerate(results, 1):
        best = result.best_point()
        css = "best" if result is winner else ("" if result.feasible else "out")
        parts.append(
            f'<tr class="{css}"><td>{index}</td><td>{html.escape(result.candidate.label())}</td>'
            f"<td>{best.concurrency if best else '-'}</td>"
            f"<td>{f'{best.throughput:,.0f}' if best else '-'}</td>"
            f"<td>{f'{latency_ms(best, metric):.2f}' if best else '-'}</td><td>{result.memory_mb:,.0f}</td>"
            f"<td>{_gpu_mib(result) or '-'}</td>"
            f'<td>{len(result.points)}</td>'
            f'<td class="reason">{html.escape(result.reason() or "ok")}</td></tr>'
        )
    parts.append("</table>")
    series = [(r.candidate.label(), PALETTE[i % len(PALETTE)], r) for i, r in enumerate(results) if r.points]
    marker = None
    if objectives.latency_budget_ms is not None:
        marker = (objectives.latency_budget_ms, f"budget {objectives.latency_budget_ms:g} ms")
    parts.append(
        line_chart(
            f"{model}: throughput vs {metric} latency",
            f"{metric} latency (ms)",
            "inferences / s",
            [
                (label, colour, [(latency_ms(p, metric), p.throughput) for p in r.points])
                for label, colour, r in series
            ],
            x_marker=marker,
        )
    )
    parts.append(
        line_chart(
            f"{model}: throughput vs concurrency",
            "concurrency (requests in flight)",
            "inferences / s",
            [
                (label, colour, [(float(p.concurrency), p.throughput) for p in r.points])
                for label, colour, r in series
            ],
            log2_x=True,
        )
    )
    if winner is not None:
        text = pbtxt(winner.file_config or winner.config)
        parts.append(f"<h3>Best config.pbtxt</h3><pre>{html.escape(text)}</pre>")
    return "\n".join(parts)


def write_html(
    out: Path, ranked: dict[str, list[CandidateResult]], objectives: Objectives, context: str
) -> Path:
    constraints = []
    if objectives.latency_budget_ms is not None:
        constraints.append(f"{objectives.latency_metric} latency &le; {objectives.latency_budget_ms:g} ms")
    if objectives.min_throughput is not None:
        constraints.append(f"throughput &ge; {objectives.min_throughput:g} infer/s")
    if objectives.max_memory_mb is not None:
        constraints.append(f"peak RSS &le; {objectives.max_memory_mb:g} MiB")
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>naiad analyze report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>naiad analyze</h1>",
        f'<p class="meta">Objective: <b>{objectives.objective}</b>. Constraints: '
        f"{', '.join(constraints) or 'none'}. {html.escape(context)}</p>",
        '<p class="meta">Each line is one candidate configuration; each point one concurrency level '
        "(requests in flight), measured until stable. A candidate is ranked by its best point within the "
        "constraints; one with no such point is listed after the others and never chosen. Memory is the peak "
        "resident set of the server process tree while the candidate ran (GPU memory: NVML, where "
        "present).</p>",
    ]
    body += [_model_section(model, results, objectives) for model, results in ranked.items()]
    body.append("</body></html>")
    path = out / "report.html"
    path.write_text("\n".join(body))
    return path


def write_all(
    out: Path, measured: dict[str, list[CandidateResult]], objectives: Objectives, context: str
) -> dict[str, list[CandidateResult]]:
    out.mkdir(parents=True, exist_ok=True)
    ranked = {model: rank(results) for model, results in measured.items()}
    write_best_configs(out, ranked)
    write_csvs(out, ranked, objectives)
    write_html(out, ranked, objectives, context)
    return ranked
