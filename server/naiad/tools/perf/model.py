"""What the profiler must know of a model to build valid requests, read from its metadata and config."""

from __future__ import annotations

from dataclasses import dataclass

from naiad.tools.perf.control import Control, Json


@dataclass(frozen=True)
class TensorSpec:
    """One input or output; ``shape`` excludes the batch dimension of a batching model."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ModelInfo:
    name: str
    version: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int
    decoupled: bool
    sequence: bool
    response_cache: bool
    ensemble: bool


def _tensors(entries: list[Json], batching: bool) -> tuple[TensorSpec, ...]:
    specs = []
    for entry in entries:
        shape = tuple(int(d) for d in entry.get("shape", []))
        if batching and shape:
            shape = shape[1:]
        specs.append(TensorSpec(str(entry["name"]), str(entry["datatype"]), shape))
    return tuple(specs)


def read_model(control: Control, name: str, version: str = "") -> ModelInfo:
    """Metadata for names, datatypes and shapes; config for batching, decoupling, sequences and cache."""
    metadata = control.metadata(name, version)
    config = control.config(name, version)
    max_batch = int(config.get("max_batch_size", 0) or 0)
    policy = config.get("model_transaction_policy") or {}
    return ModelInfo(
        name=name,
        version=version,
        inputs=_tensors(list(metadata.get("inputs", [])), max_batch > 0),
        outputs=_tensors(list(metadata.get("outputs", [])), max_batch > 0),
        max_batch_size=max_batch,
        decoupled=bool(policy.get("decoupled", False)),
        sequence="sequence_batching" in config,
        response_cache=bool((config.get("response_cache") or {}).get("enable", False)),
        ensemble=config.get("platform") == "ensemble",
    )
