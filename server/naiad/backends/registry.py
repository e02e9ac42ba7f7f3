"""Backend name -> implementation, imported only when a model needs it.

Frameworks are optional extras: importing ``onnxruntime`` or ``torch`` costs memory and start-up time,
and a missing one must make only its models UNAVAILABLE (with a reason saying which extra to install),
never the server fail.
"""

from __future__ import annotations

import importlib

from naiad.backends.base import Backend
from naiad.core.errors import UnavailableError

#: backend name -> (module, class, how to get the framework when it is missing)
_BACKENDS: dict[str, tuple[str, str, str]] = {
    "python": ("naiad.backends.python.backend", "PythonBackend", ""),
    "onnxruntime": ("naiad.backends.onnxruntime", "OnnxRuntimeBackend", "install it with: pip install naiad"),
    "pytorch": ("naiad.backends.pytorch", "PyTorchBackend", "install it with: pip install 'naiad[torch]'"),
    "tensorrt": (
        "naiad.backends.tensorrt.backend",
        "TensorRTBackend",
        "TensorRT needs an NVIDIA GPU; the GPU server image provides it (with CUDA torch)",
    ),
}

_loaded: dict[str, Backend] = {}


def get_backend(name: str) -> Backend:
    """The backend called ``name``; UNAVAILABLE with the reason when it cannot be used here."""
    backend = _loaded.get(name)
    if backend is not None:
        return backend
    entry = _BACKENDS.get(name)
    if entry is None:
        raise UnavailableError(f"unable to find backend '{name}': it is not supported by this server")
    module_name, class_name, remedy = entry
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f"; {remedy}" if remedy else ""
        raise UnavailableError(
            f"backend '{name}' is not available: {exc.name or exc} is not installed{hint}"
        ) from exc
    backend = getattr(module, class_name)()
    _loaded[name] = backend
    return backend


def loaded_backend(name: str) -> Backend | None:
    """The backend called ``name`` if a model has needed it already (never imports one)."""
    return _loaded.get(name)
