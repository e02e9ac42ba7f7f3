"""A plan model on a host without TensorRT: UNAVAILABLE with a reason saying where TensorRT comes from."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.backends.pytorch.index import settled_index
from tests.backends.pytorch.models import write_config
from tests.support.http import RawClient
from tests.support.server import ServerProcess

CONFIG = """
platform: "tensorrt_plan"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 8 ] } ]
"""


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None, reason="TensorRT is installed here")
def test_plan_model_without_tensorrt_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    model_dir = write_config(tmp_path / "repo" / "mlp_plan", CONFIG)
    (model_dir / "1").mkdir()
    (model_dir / "1" / "model.plan").write_bytes(b"not an engine: never read without TensorRT")
    with ServerProcess([tmp_path / "repo"], ["--exit-on-error=false"], wait_ready=False) as server:
        raw = RawClient(server.http_url)
        try:
            entry = settled_index(raw, {"mlp_plan"})["mlp_plan"]
            assert entry["state"] == "UNAVAILABLE"
            assert entry["reason"] == (
                "Unavailable: backend 'tensorrt' is not available: tensorrt is not installed; TensorRT needs an NVIDIA GPU; "
                "the GPU server image provides it (with CUDA torch)"
            )
        finally:
            raw.close()
