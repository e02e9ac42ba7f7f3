"""Backend name -> implementation, imported only when a model needs it (through the server's
:class:`~naiad.backends.runtime.Runtime`, which keeps the backends it made).

Frameworks are optional extras: importing ``onnxruntime`` or ``torch`` costs memory and start-up time,
and a missing one must make only its models UNAVAILABLE (with a reason saying which extra to install),
never the server fail.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from naiad.backends.base import Backend
from naiad.core.errors import InvalidArgumentError, UnavailableError

if TYPE_CHECKING:
    from naiad.backends.runtime import Runtime

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

#: The backends constructed with the server's :class:`~naiad.backends.runtime.Runtime` (the others
#: need nothing of the server).
_WITH_RUNTIME = frozenset({"python", "onnxruntime"})


def built_in(name: str) -> bool:
    """Whether ``name`` is one of this server's own backends."""
    return name in _BACKENDS


def create(name: str, runtime: Runtime) -> Backend:
    """A new backend called ``name`` for ``runtime``; UNAVAILABLE with the reason when it cannot be
    used here."""
    entry = _BACKENDS.get(name)
    if entry is None:
        raise InvalidArgumentError(  # (Triton's code and words, then why: neither Naiad's nor Python-based)
            f"unable to find backend library for backend '{name}', try specifying runtime on the model "
            f"configuration. '{name}' is none of this server's backends ({', '.join(_BACKENDS)}) and no "
            "Python-based backend of that name is in --backend-directory"
        )
    module_name, class_name, remedy = entry
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f"; {remedy}" if remedy else ""
        raise UnavailableError(
            f"backend '{name}' is not available: {exc.name or exc} is not installed{hint}"
        ) from exc
    factory = getattr(module, class_name)
    backend: Backend = factory(runtime) if name in _WITH_RUNTIME else factory()
    return backend
