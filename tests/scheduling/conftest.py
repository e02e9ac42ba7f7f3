"""A server over the purpose-made scheduling models (Python probes and a batched ONNX model)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scheduling.models import write_probe
from tests.support.models import write_model
from tests.support.server import ROOT, ServerProcess

ONNX_BATCHED = """
name: "onnx_batched"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
dynamic_batching { max_queue_delay_microseconds: 100000 }
"""


def _build_simple(path: Path) -> None:
    spec = importlib.util.spec_from_file_location("build_examples", ROOT / "scripts" / "build_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build_simple(path)


@pytest.fixture(scope="package")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("scheduling-repo")
    write_probe(repo, "batcher", extra="dynamic_batching { }")
    write_probe(repo, "preferred", extra="dynamic_batching { preferred_batch_size: [ 2, 4 ] }")
    write_probe(repo, "delayed", extra="dynamic_batching { max_queue_delay_microseconds: 500000 }")
    write_probe(
        repo,
        "prioritized",
        max_batch_size=1,
        extra="dynamic_batching { priority_levels: 2 default_priority_level: 2 }",
    )
    write_probe(
        repo,
        "bounded",
        max_batch_size=1,
        extra="dynamic_batching { default_queue_policy { max_queue_size: 2 } }",
    )
    write_probe(
        repo,
        "expiring",
        max_batch_size=1,
        extra="dynamic_batching { default_queue_policy { default_timeout_microseconds: 300000 allow_timeout_override: true } }",
    )
    write_probe(
        repo,
        "delaying",
        max_batch_size=1,
        extra="dynamic_batching { default_queue_policy { timeout_action: DELAY "
        "default_timeout_microseconds: 60000000 allow_timeout_override: true } }",
    )
    write_probe(
        repo, "ordered", max_batch_size=1, count=2, extra="dynamic_batching { preserve_ordering: true }"
    )
    write_probe(repo, "unordered", max_batch_size=1, count=2, extra="dynamic_batching { }")
    write_probe(repo, "parallel", count=2)
    write_probe(repo, "watcher")
    write_probe(
        repo,
        "watcher_process",
        extra='parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "true" } }',
    )
    write_model(repo, "onnx_batched", ONNX_BATCHED)
    _build_simple(repo / "onnx_batched" / "1" / "model.onnx")
    return repo


@pytest.fixture(scope="package")
def server(repo: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    with ServerProcess([repo], frontend_workers=frontend_workers) as process:
        yield process
