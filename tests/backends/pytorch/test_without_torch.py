"""A server on a host without torch: its torch models are UNAVAILABLE, saying which extra to install.

The server runs with a ``sitecustomize`` that makes ``import torch`` fail as it does where torch is not
installed, beside an ONNX model that must still serve.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import torch

from tests.backends.pytorch.index import settled_index
from tests.backends.pytorch.models import mlp, mlp_config, save_onnx, save_torchscript
from tests.support.http import RawClient
from tests.support.server import ServerProcess

NO_TORCH = """
import importlib.abc
import sys


class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
"""


def test_torch_model_is_unavailable_naming_the_extra(tmp_path: Path) -> None:
    blocker = tmp_path / "no_torch"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(textwrap.dedent(NO_TORCH))
    repo = tmp_path / "repo"
    save_torchscript(mlp(), repo / "mlp_torch", mlp_config("pytorch_libtorch"))
    save_onnx(mlp(), torch.zeros(1, 8), repo / "mlp_onnx", mlp_config("onnxruntime_onnx"))
    path = os.pathsep.join(p for p in (str(blocker), os.environ.get("PYTHONPATH", "")) if p)
    args = ["--exit-on-error=false"]  # (mlp_torch fails to load on purpose)
    with ServerProcess([repo], args, wait_ready=False, env={"PYTHONPATH": path}) as server:
        raw = RawClient(server.http_url)
        try:
            entries = settled_index(raw, {"mlp_torch", "mlp_onnx"})
            assert entries["mlp_onnx"]["state"] == "READY"
            assert entries["mlp_torch"]["state"] == "UNAVAILABLE"
            assert entries["mlp_torch"]["reason"] == (
                "Unavailable: backend 'pytorch' is not available: torch is not installed; install it with: pip install "
                "'naiad[torch]'"
            )
            body = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 8], "data": [0] * 8}]}
            assert raw.post_json("/v2/models/mlp_torch/infer", body).status == 404  # no available versions, as Triton
        finally:
            raw.close()
