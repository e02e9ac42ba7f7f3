"""Small torch networks of our own, saved the ways users save them, for the PyTorch backend tests.

Every model is built here from an ``nn.Module`` with fixed seeds, so the tests can compare what the
server returns with what eager torch computes on the same weights.  The saving helpers write a model
folder of a repository: TorchScript (``torch.jit.script``), ``torch.export`` programs, and the same
network exported to ONNX for the ONNX Runtime backend.
"""

from __future__ import annotations

import itertools
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from naiad.repository.layout import CONFIG_FILE
from torch import Tensor, nn

Array = np.ndarray[Any, Any]


class TwoHeads(nn.Module):
    """Two inputs and two outputs of different shapes, so that binding by name, by ``__<index>`` and by
    config order can be told apart: feeding the inputs in the wrong order fails or changes the result."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.body = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, features: Tensor, offset: Tensor) -> tuple[Tensor, Tensor]:
        out = self.body(features)
        return out + offset, out.sum(dim=1, keepdim=True)


def mlp(sizes: tuple[int, ...] = (8, 32, 32, 4), seed: int = 0) -> nn.Sequential:
    """Linear layers with ReLU between them: the network the server and benchmark tests serve."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for index, (width_in, width_out) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(width_in, width_out))
        if index < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).eval()


class Upper(nn.Module):
    """Strings in and out: TorchScript's ``List[str]``, which BYTES tensors become."""

    def forward(self, text: list[str]) -> list[str]:
        return [item.upper() for item in text]


class Difference(nn.Module):
    """A ``forward`` taking one ``Dict(str, Tensor)``: inputs arrive under their config names."""

    def forward(self, inputs: dict[str, Tensor]) -> Tensor:
        return inputs["a"] - inputs["b"]


def eager(module: nn.Module, *arrays: Array) -> list[Array]:
    """``module``'s outputs for ``arrays`` in eager torch: the reference every served result must match."""
    with torch.no_grad():
        result = module(*(torch.from_numpy(a) for a in arrays))
    outputs = result if isinstance(result, tuple) else (result,)
    return [output.numpy() for output in outputs]


def write_config(model_dir: Path, config: str) -> Path:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / CONFIG_FILE).write_text(textwrap.dedent(config))
    return model_dir


def save_torchscript(module: nn.Module, model_dir: Path, config: str, filename: str = "model.pt") -> Path:
    """``model_dir/1/<filename>`` scripted from ``module``, with ``config`` beside it."""
    path = model_dir / "1" / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.script(module.eval()).save(str(path))
    return write_config(model_dir, config)


def save_exported(
    module: nn.Module, example: tuple[Tensor, ...], model_dir: Path, config: str, filename: str = "model.pt2"
) -> Path:
    """``model_dir/1/<filename>``: ``torch.export`` of ``module`` with a dynamic batch dimension."""
    batch = torch.export.Dim("batch", min=1, max=64)
    shapes = tuple({0: batch} for _ in example)
    program = torch.export.export(module.eval(), example, dynamic_shapes=shapes)
    path = model_dir / "1" / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, str(path))
    return write_config(model_dir, config)


def save_onnx(module: nn.Module, example: Tensor, model_dir: Path, config: str) -> Path:
    """``model_dir/1/model.onnx``: ``module`` through ``torch.onnx.export`` with a dynamic batch.

    The TorchScript-based exporter is used because the newer one needs ``onnxscript``; it warns that
    it is deprecated, which is beside the point here, so that warning is silenced for this call only.
    """
    path = model_dir / "1" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            module.eval(),
            (example,),
            str(path),
            input_names=["INPUT__0"],
            output_names=["OUTPUT__0"],
            dynamic_axes={"INPUT__0": {0: "batch"}, "OUTPUT__0": {0: "batch"}},
            dynamo=False,
        )
    return write_config(model_dir, config)


def mlp_config(
    platform: str, max_batch_size: int = 8, extra: str = "", sizes: tuple[int, ...] = (8, 4)
) -> str:
    """The config of an MLP model taking ``INPUT__0`` and returning ``OUTPUT__0``, both FP32."""
    return f"""
        platform: "{platform}"
        max_batch_size: {max_batch_size}
        input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {sizes[0]} ] }} ]
        output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {sizes[-1]} ] }} ]
        {extra}
        """
