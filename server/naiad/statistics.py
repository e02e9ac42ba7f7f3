"""The statistics extension's document, field for field as Triton's ``TRITONSERVER_ServerModelStatistics``.

Every READY version is reported (models by name, versions in order) with Triton's counting:
``queue`` and the ``compute_*`` durations count successful requests, ``inference_count`` their batch
elements, ``execution_count`` model executions, ``batch_stats`` one row per executed batch size.
Requests answered by the response cache count in ``success``, ``queue`` and ``cache_hit``, not in the
``compute_*`` durations; ``cache_miss`` counts the lookups (and insertions) that found nothing, as in
Triton.  ``response_stats`` (per response of a decoupled model) and ``memory_usage`` (what a backend
reports it allocated) are empty, as Triton's Python backend leaves them.  The same dictionary serves
HTTP (as JSON) and gRPC (parsed into ``ModelStatisticsResponse``, whose field names are these).
"""

from __future__ import annotations

from typing import Any

from naiad.core.errors import InvalidArgumentError
from naiad.repository.model import Model
from naiad.repository.registry import ModelRegistry
from naiad.scheduling.stats import SchedulerStats


def model_statistics(registry: ModelRegistry, name: str, version: str) -> dict[str, Any]:
    """``{"model_stats": [...]}`` for every ready version, ``name``'s, or one version of it.

    Errors as Triton's (INVALID_ARG): ``requested model '<m>' is not available`` when the model has no
    ready version (or, under ``--model-namespacing``, when several repositories hold a model of that
    name), ``requested model version is not available for model '<m>'``.
    """
    chosen: list[tuple[Model, int]] = []
    if not name:
        for _, listed in sorted(registry.models().items()):
            chosen += [(listed, number) for number in listed.ready_versions()]
    else:
        model = registry.unique(name)  # (an ambiguous name: not available, as in Triton)
        ready = model.ready_versions() if model is not None else []
        if model is None or not ready:
            raise InvalidArgumentError(f"requested model '{name}' is not available")
        if version:
            if not version.isdigit() or int(version) not in ready:
                raise InvalidArgumentError(f"requested model version is not available for model '{name}'")
            ready = [int(version)]
        chosen = [(model, number) for number in ready]
    stats = []
    for model, number in chosen:
        scheduler = model.versions[number].scheduler
        if scheduler is not None:
            stats.append(_version_statistics(model.name, number, scheduler.stats))
    return {"model_stats": stats}


def _version_statistics(name: str, version: int, stats: SchedulerStats) -> dict[str, Any]:
    succeeded = stats.success_count
    computed = succeeded - stats.cache_hit_count
    return {
        "name": name,
        "version": str(version),
        "last_inference": stats.last_inference_ms,
        "inference_count": stats.inference_count,
        "execution_count": stats.execution_count,
        "inference_stats": {
            "success": _duration(succeeded, stats.success_ns),
            "fail": _duration(stats.failure_count, stats.failure_ns),
            "queue": _duration(succeeded, stats.queue_ns),
            "compute_input": _duration(computed, stats.compute_input_ns),
            "compute_infer": _duration(computed, stats.compute_infer_ns),
            "compute_output": _duration(computed, stats.compute_output_ns),
            "cache_hit": _duration(stats.cache_hit_count, stats.cache_hit_ns),
            "cache_miss": _duration(stats.cache_miss_count, stats.cache_miss_ns),
        },
        "response_stats": {},
        "batch_stats": [
            {
                "batch_size": size,
                "compute_input": _duration(batch.count, batch.compute_input_ns),
                "compute_infer": _duration(batch.count, batch.compute_infer_ns),
                "compute_output": _duration(batch.count, batch.compute_output_ns),
            }
            for size, batch in sorted(stats.batches.items())
        ],
        "memory_usage": [],
    }


def _duration(count: int, ns: int) -> dict[str, int]:
    return {"count": count, "ns": ns}
