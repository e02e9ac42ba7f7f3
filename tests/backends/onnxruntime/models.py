"""ONNX model folders, configs and requests for the ONNX Runtime backend tests.

Configs go through the repository's own steps in the repository's order (read, resolve backend,
auto-complete, normalize, signature), so an instance here sees exactly what a served one sees.  Small
graphs are written with ``onnx.helper`` through the example builder's ``make_model``/``save``.
"""

from __future__ import annotations

import importlib.util
import textwrap
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
from naiad.backends.base import InstanceContext, ModelInstance
from naiad.core import datatypes
from naiad.core.request import InferRequest, RequestedOutput, Tensor
from naiad.repository.config import normalize, read_config, resolve_backend, signature_of
from naiad.repository.layout import CONFIG_FILE, available_versions
from onnx import helper

from tests.support.backends import get_backend

ROOT = Path(__file__).resolve().parents[3]
TRITON_EXAMPLES = ROOT.parent / "shared" / "triton-examples" / "model_repository"

#: The ``instances`` fixture: ``instances(model_dir, kind="CPU")`` -> a loaded instance.
LoadInstance = Callable[..., ModelInstance]


@cache
def build_examples() -> ModuleType:
    """``scripts/build_examples.py``, imported from its path (``scripts`` is not a package)."""
    spec = importlib.util.spec_from_file_location("build_examples", ROOT / "scripts" / "build_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tensor_info(name: str, elem_type: int, shape: Sequence[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, list(shape))


def write_model(
    root: Path,
    name: str,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    config: str | None = None,
) -> Path:
    """``root/name`` holding ``1/model.onnx`` of the given graph and an optional ``config.pbtxt``."""
    model_dir = root / name
    graph = helper.make_graph(nodes, name, inputs, outputs)
    build_examples().save(build_examples().make_model(graph), model_dir / "1" / "model.onnx")
    if config is not None:
        (model_dir / CONFIG_FILE).write_text(textwrap.dedent(config))
    return model_dir


def load_config(model_dir: Path) -> Any:
    """The config after the repository's steps, in the repository's order."""
    config = read_config(model_dir)
    versions = available_versions(model_dir)
    if not config.name:
        config.name = model_dir.name
    resolve_backend(config, model_dir, versions)
    latest = model_dir / str(versions[-1]) if versions else None
    get_backend(config.backend).auto_complete(config, model_dir, latest)
    normalize(config, model_dir.name)
    return config


def instance_context(
    model_dir: Path, kind: str = "CPU", device_id: int = 0, version: int = 1
) -> InstanceContext:
    config = load_config(model_dir)
    version_dir = model_dir / str(version)
    return InstanceContext(
        model_name=model_dir.name,
        model_version=version,
        model_dir=model_dir,
        version_dir=version_dir,
        model_file=version_dir / config.default_model_filename,
        config=config,
        signature=signature_of(config),
        instance_name=f"{model_dir.name}_0",
        kind=kind,
        device_id=device_id,
    )


def request(
    model: str, inputs: dict[str, np.ndarray[Any, Any]], outputs: Sequence[str] | None = None
) -> InferRequest:
    """A request as the codecs build one: numpy tensors, protocol datatypes from their dtypes."""
    return InferRequest(
        model_name=model,
        id=f"{model}-request",
        inputs=[Tensor(name, datatypes.from_numpy(a.dtype), a) for name, a in inputs.items()],
        outputs=None if outputs is None else [RequestedOutput(name) for name in outputs],
    )


def as_bytes(values: Any) -> np.ndarray[Any, Any]:
    """An object array of ``bytes``: how the server carries BYTES tensors."""
    array = np.asarray(values)
    out = np.empty(array.shape, dtype=np.object_)
    out.flat[:] = [str(v).encode() for v in array.flat]
    return out
