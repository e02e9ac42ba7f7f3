"""Loading a torch model file into something callable, whatever the format it was saved in.

Three formats are served:

* TorchScript (``model.pt``, ``torch.jit.save``): what Triton's ``pytorch_libtorch`` platform runs;
  ``forward``'s schema gives the argument names and types.
* ``torch.export`` programs (``model.pt2`` from ``torch.export.save``): the format PyTorch now
  recommends over TorchScript; the unlifted module's signature gives the argument names.
* AOTInductor packages (``model.pt2`` from ``torch._inductor.aoti_compile_and_package``): what Triton's
  ``torch_aoti`` platform runs; compiled code keeps no argument names, so inputs bind by
  ``<name>__<index>`` or config order.

Both ``.pt2`` kinds are zip archives; the AOTInductor one is recognised by its compiled
``data/aotinductor`` entries.
"""

from __future__ import annotations

import inspect
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from naiad.core.errors import InternalError, UnavailableError

#: The archive folder that holds an AOTInductor package's compiled model.
_AOTI_ENTRY = "/data/aotinductor/"


@dataclass(frozen=True, slots=True)
class Program:
    """A loaded model: ``forward`` takes positional tensors (or one dict) and returns its outputs.

    ``arguments`` are ``forward``'s argument names, ``None`` when the format keeps none;
    ``scripted`` says the TorchScript graph executor runs it (``DISABLE_OPTIMIZED_EXECUTION`` applies).
    """

    forward: Callable[..., Any]
    arguments: tuple[str, ...] | None
    dict_input: bool
    scripted: bool


def load_program(path: Path, device: torch.device | None, model_name: str, inference_mode: bool) -> Program:
    """Load ``path`` onto ``device`` (``None``: where the model itself says, for ``KIND_MODEL``).

    As in Triton, loading runs under the inference mode the model executes with, so tensors created
    at load time can be used by its calls.
    """
    if not path.is_file():
        raise UnavailableError(f"unable to find '{path}' for model instance '{model_name}'")
    try:
        with torch.inference_mode(inference_mode):
            if path.suffix != ".pt2":
                return _torchscript(path, device, model_name)
            if _is_aoti_package(path):
                return _aoti_package(path, device)
            return _exported_program(path, device)
    except (RuntimeError, ValueError, OSError, zipfile.BadZipFile) as exc:
        raise InternalError(f"failed to load model '{model_name}': {exc}") from exc


def _torchscript(path: Path, device: torch.device | None, model_name: str) -> Program:
    module = torch.jit.load(str(path), map_location=device)  # type: ignore[no-untyped-call]
    module.eval()
    arguments = list(module.forward.schema.arguments)
    if arguments and arguments[0].type.kind() == "ClassType":
        arguments = arguments[1:]
    kinds = [argument.type.kind() for argument in arguments]
    if kinds == ["DictType"]:
        return Program(module, (arguments[0].name,), dict_input=True, scripted=True)
    if "DictType" in kinds:
        raise InternalError(
            "Multiple inputs of kind DictType were detected. Only a single input of type Dict(str, Tensor) "
            "is supported."
        )
    for argument in arguments:
        if argument.type.kind() not in ("TensorType", "ListType"):
            raise InternalError(
                f"An input of type '{argument.type}' was detected in the model. Only a single input of type "
                "Dict(str, Tensor) or input(s) of type Tensor are supported."
            )
    return Program(module, tuple(a.name for a in arguments), dict_input=False, scripted=True)


def _is_aoti_package(path: Path) -> bool:
    with zipfile.ZipFile(path) as archive:
        return any(_AOTI_ENTRY in name for name in archive.namelist())


def _aoti_package(path: Path, device: torch.device | None) -> Program:
    index = device.index if device is not None and device.type == "cuda" and device.index is not None else -1
    compiled = torch._inductor.aoti_load_package(str(path), device_index=index)
    return Program(compiled, None, dict_input=False, scripted=False)


def _exported_program(path: Path, device: torch.device | None) -> Program:
    module = torch.export.load(str(path)).module()
    if device is not None:
        module = module.to(device)
    parameters = inspect.signature(module.forward).parameters.values()
    names = tuple(p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    return Program(module, names, dict_input=False, scripted=False)
