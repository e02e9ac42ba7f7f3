"""Model folders and instance contexts built exactly as the repository builds them.

Tests load real ``model.py`` files through the real config path (parse, resolve backend,
auto-complete, normalize, signature), so what a test instance sees is what a served one sees.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from naiad.backends.base import InstanceContext
from naiad.backends.python.instance import PythonModelInstance
from naiad.core.request import InferRequest, RequestedOutput, Tensor
from naiad.repository.config import normalize, parse_text, resolve_backend, signature_of
from naiad.repository.layout import CONFIG_FILE, available_versions

from tests.support.backends import get_backend

#: The ``instances`` fixture: ``instances(model_dir, index=0)`` -> a loaded instance.
LoadInstance = Callable[..., PythonModelInstance]

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "model_repository"


def write_model(
    root: Path,
    name: str,
    model_py: str,
    config: str | None = None,
    files: dict[str, str] | None = None,
) -> Path:
    """``root/name`` with ``1/model.py``, an optional ``config.pbtxt`` and extra files in ``1/``."""
    model_dir = root / name
    version_dir = model_dir / "1"
    version_dir.mkdir(parents=True)
    (version_dir / "model.py").write_text(textwrap.dedent(model_py))
    if config is not None:
        (model_dir / CONFIG_FILE).write_text(textwrap.dedent(config))
    for filename, text in (files or {}).items():
        (version_dir / filename).write_text(textwrap.dedent(text))
    return model_dir


def load_config(model_dir: Path) -> Any:
    """The normalized config, through the same steps (and order) as the repository."""
    path = model_dir / CONFIG_FILE
    config = parse_text(path.read_text() if path.exists() else "", str(path))
    versions = available_versions(model_dir)
    resolve_backend(config, model_dir, versions)
    get_backend("python").auto_complete(config, model_dir, model_dir / str(versions[-1]))
    normalize(config, model_dir.name)
    return config


def instance_context(model_dir: Path, index: int = 0, version: int = 1) -> InstanceContext:
    config = load_config(model_dir)
    version_dir = model_dir / str(version)
    return InstanceContext(
        model_name=config.name,
        model_version=version,
        model_dir=model_dir,
        version_dir=version_dir,
        model_file=version_dir / config.default_model_filename,
        config=config,
        signature=signature_of(config),
        instance_name=f"{config.instance_group[0].name}_{index}",
        kind="CPU",
        device_id=0,
    )


def wire_view(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``array`` as the binary frontends hand it in: a read-only view of the received bytes."""
    if array.dtype == np.object_:
        return array
    return np.frombuffer(array.tobytes(), dtype=array.dtype).reshape(array.shape)


def request(
    model: str, request_id: str = "", outputs: list[str] | None = None, **inputs: Any
) -> InferRequest:
    """A request with FP32 inputs from lists, or BYTES inputs from object arrays."""
    tensors = []
    for name, value in inputs.items():
        array = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=np.float32)
        datatype = "BYTES" if array.dtype == np.object_ else "FP32"
        tensors.append(Tensor(name, datatype, wire_view(array)))
    return InferRequest(
        model_name=model,
        id=request_id,
        inputs=tensors,
        outputs=None if outputs is None else [RequestedOutput(name) for name in outputs],
    )
