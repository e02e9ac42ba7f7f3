"""perf_analyzer's printed report and its ``-f`` CSV (same lines, same columns, same units: usec)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from naiad.tools.perf.engine import PERCENTILES, Measurement
from naiad.tools.perf.model import ModelInfo


def _us(value: float) -> int:
    return int(value)


def settings_text(
    batch: int,
    interval_ms: int,
    percentile: int | None,
    info: ModelInfo,
    concurrency_end: int | None,
    rate_end: float | None,
    latency_threshold_ms: int | None,
) -> str:
    lines = [
        "*** Measurement Settings ***",
        f"  Batch size: {batch}",
        "  Service Kind: Triton",
        '  Using "time_windows" mode for stabilization',
    ]
    metric = "latency and throughput"
    lines.append(
        f"  Stabilizing using average {metric}"
        if percentile is None
        else f"  Stabilizing using p{percentile} {metric}"
    )
    lines.append(f"  Measurement window: {interval_ms} msec")
    if (concurrency_end not in (None, 1)) or (rate_end not in (None, 1.0)):
        lines.append(f"  Latency limit: {latency_threshold_ms or 0} msec")
    if concurrency_end not in (None, 0, 1):
        lines.append(f"  Concurrency limit: {concurrency_end} concurrent requests")
    if rate_end is not None:
        lines.append(f"  Request Rate limit: {rate_end:g} requests per seconds")
        lines.append("  Using uniform distribution on request generation")
    lines.append("  Using synchronous calls for inference")
    if info.decoupled:
        lines.append("  Detected decoupled model, using the first response for measuring latency")
    return "\n".join(lines) + "\n"


def level_text(
    m: Measurement, protocol: str, info: ModelInfo, server_stats: bool, verbose: bool = False
) -> str:
    head = (
        f"Request concurrency: {m.concurrency}"
        if m.request_rate == 0
        else f"Request Rate: {m.request_rate:g}"
    )
    lines = [head, "  Client: ", f"    Request count: {m.request_count}"]
    if m.error_count:
        lines.append(f"    Error count: {m.error_count}")
    if info.sequence:
        per_second = m.sequence_count / m.seconds if m.seconds else 0.0
        lines.append(f"    Sequence count: {m.sequence_count} ({per_second:g} seq/sec)")
    lines.append(f"    Throughput: {m.throughput:g} infer/sec")
    if info.decoupled:
        lines.append(f"    Response Throughput: {m.response_throughput:g} infer/sec")
    if verbose:
        lines.append(f"    Avg client overhead: {m.client_overhead_pct:.2f}% of a core "
                     f"({m.client_cpu_us_per_request:.1f} usec CPU per request)")
    if m.percentile is None:
        lines.append(
            f"    Avg latency: {_us(m.avg_latency_us)} usec (standard deviation {_us(m.std_latency_us)} usec)"
        )
    for p in PERCENTILES:
        lines.append(f"    p{p} latency: {_us(m.percentiles_us[p])} usec")
    request = _us(m.avg_latency_us)
    send_recv = _us(m.avg_send_us) + _us(m.avg_receive_us)
    if protocol == "grpc":
        lines.append(
            f"    Avg gRPC time: {request} usec ((un)marshal request/response {send_recv} usec + "
            f"response wait {request - send_recv} usec)"
        )
    else:
        lines.append(
            f"    Avg HTTP time: {request} usec (send/recv {send_recv} usec + response wait "
            f"{request - send_recv} usec)"
        )
    if server_stats:
        s = m.server
        lines.append("  Server: ")
        if s.success_count == 0:
            lines.append("    Request count: 0")
        else:
            queue, cin, cinf, cout = (
                s.average_us(k) for k in ("queue", "compute_input", "compute_infer", "compute_output")
            )
            request_us = s.average_us("success")
            overhead = max(0.0, request_us - queue - cin - cinf - cout)
            lines += [
                f"    Inference count: {s.inference_count}",
                f"    Execution count: {s.execution_count}",
                f"    Successful request count: {s.success_count}",
                f"    Avg request latency: {_us(request_us)} usec (overhead {_us(overhead)} usec + queue "
                f"{_us(queue)} usec + compute input {_us(cin)} usec + compute infer {_us(cinf)} usec + "
                f"compute output {_us(cout)} usec)",
            ]
    if m.errors:
        lines.append("  Errors: ")
        lines += [
            f"    {count} x {message}" for message, count in sorted(m.errors.items(), key=lambda e: -e[1])
        ]
    if not m.stable:
        lines.append(
            "  [WARNING] the measurement did not stabilize within --max-trials windows; "
            "these figures are the last three windows"
        )
    return "\n".join(lines) + "\n"


def summary_text(measurements: Sequence[Measurement], percentile: int | None) -> str:
    title = "Average" if percentile is None else f"p{percentile}"
    lines = [f"Inferences/Second vs. Client {title} Batch Latency"]
    for m in measurements:
        head = f"Concurrency: {m.concurrency}" if m.request_rate == 0 else f"Request Rate: {m.request_rate:g}"
        lines.append(
            f"{head}, throughput: {m.throughput:g} infer/sec, latency {_us(m.stabilizing_latency_us)} usec"
        )
    return "\n".join(lines) + "\n"


def csv_header(
    concurrency: bool, info: ModelInfo, server_stats: bool, verbose: bool, percentile: int | None
) -> list[str]:
    header = ["Concurrency" if concurrency else "Request Rate", "Inferences/Second"]
    if info.decoupled:
        header.append("Response Throughput")
    header.append("Client Send")
    if server_stats:
        header += [
            "Network+Server Send/Recv",
            "Server Queue",
            "Server Compute Input",
            "Server Compute Infer",
            "Server Compute Output",
        ]
        if info.response_cache:
            header += ["Server Cache Hit", "Server Cache Miss"]
    header.append("Client Recv")
    header += [f"p{p} latency" for p in PERCENTILES]
    if verbose:
        if percentile is None:
            header.append("Avg latency")
        header += ["request/response", "response wait"]
    return header


def csv_row(m: Measurement, info: ModelInfo, server_stats: bool, verbose: bool) -> list[object]:
    row: list[object] = [m.concurrency if m.request_rate == 0 else m.request_rate, m.throughput]
    if info.decoupled:
        row.append(m.response_throughput)
    row.append(_us(m.avg_send_us))
    if server_stats:
        s = m.server
        queue, cin, cinf, cout = (
            s.average_us(k) for k in ("queue", "compute_input", "compute_infer", "compute_output")
        )
        hit, miss = s.average_us("cache_hit"), s.average_us("cache_miss")
        compute = (s.compute_input_ns + s.compute_infer_ns + s.compute_output_ns) / 1000
        compute_avg = compute / s.compute_input_count if s.compute_input_count else 0.0
        wait = m.avg_latency_us - m.avg_send_us - m.avg_receive_us
        network = max(0.0, wait - (queue + compute_avg + hit + miss))
        row += [_us(network), _us(queue), _us(cin), _us(cinf), _us(cout)]
        if info.response_cache:
            row += [_us(hit), _us(miss)]
    row.append(_us(m.avg_receive_us))
    row += [_us(m.percentiles_us[p]) for p in PERCENTILES]
    if verbose:
        if m.percentile is None:
            row.append(_us(m.avg_latency_us))
        send_recv = _us(m.avg_send_us) + _us(m.avg_receive_us)
        row += [send_recv, _us(m.avg_latency_us) - send_recv]
    return row


def write_csv(
    path: Path | TextIO,
    measurements: Sequence[Measurement],
    info: ModelInfo,
    server_stats: bool,
    verbose: bool,
    percentile: int | None,
) -> None:
    """Rows in order of increasing throughput, as perf_analyzer sorts them."""
    concurrency = not measurements or measurements[0].request_rate == 0
    rows = [csv_row(m, info, server_stats, verbose) for m in sorted(measurements, key=lambda m: m.throughput)]
    if isinstance(path, Path):
        with path.open("w", newline="") as handle:
            _write(handle, csv_header(concurrency, info, server_stats, verbose, percentile), rows)
    else:
        _write(path, csv_header(concurrency, info, server_stats, verbose, percentile), rows)


def _write(handle: TextIO, header: list[str], rows: list[list[object]]) -> None:
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
