"""The ``pytorch`` backend object the registry hands out: file names and instance creation."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from naiad.backends.base import InstanceContext, ModelInstance
from naiad.backends.pytorch.bindings import bind_inputs, bind_outputs
from naiad.backends.pytorch.instance import PyTorchInstance
from naiad.backends.pytorch.loads import Loads
from naiad.backends.pytorch.options import read_options
from naiad.backends.pytorch.program import load_program
from naiad.core.errors import UnavailableError

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

#: Triton's platform for AOTInductor packages, whose default file is ``model.pt2``.
AOTI_PLATFORM = "torch_aoti"
AOTI_FILENAME = "model.pt2"


class PyTorchBackend:
    """Serves torch models, one loaded copy per instance on the instance's device (one per device
    for all of a model's instances with ``ENABLE_WEIGHT_SHARING``)."""

    name = "pytorch"

    def __init__(self) -> None:
        self._loads = Loads()

    def auto_complete(self, config: mc.ModelConfig, model_dir: Path, version_dir: Path | None) -> None:
        """TorchScript records no tensor metadata, so, as in Triton, inputs and outputs are never
        filled; only a ``torch_aoti`` model gets its default file name, ``model.pt2``."""
        if config.platform == AOTI_PLATFORM and not config.default_model_filename:
            config.default_model_filename = AOTI_FILENAME

    def create_instance(self, context: InstanceContext) -> ModelInstance:
        """Load the model on the instance's device and bind the config's tensors to it."""
        config = context.config
        options = read_options(config)
        device = _device(context)
        program, done = self._loads.program(
            context,
            options,
            str(device),
            lambda: load_program(context.model_file, device, context.model_name, options.inference_mode),
        )
        try:
            inputs = bind_inputs(config, program.arguments, program.dict_input)
            outputs = bind_outputs(config)
        except BaseException:
            done()
            raise
        place = device or torch.device("cpu")
        return PyTorchInstance(context, program, place, options, inputs, outputs, done)


def _device(context: InstanceContext) -> torch.device | None:
    """``cuda:<id>`` for KIND_GPU, the CPU for KIND_CPU, ``None`` (the model places itself) for KIND_MODEL,
    whose inputs are given on the CPU as in Triton."""
    if context.kind == "MODEL":
        return None
    if context.kind != "GPU":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UnavailableError(
            f"unable to load model '{context.model_name}' on GPU {context.device_id}: the installed torch "
            f"{torch.__version__} has no CUDA support; install a CUDA build of torch (the GPU server image "
            "has one) or use KIND_CPU"
        )
    if context.device_id >= torch.cuda.device_count():
        raise UnavailableError(
            f"unable to load model '{context.model_name}' on GPU {context.device_id}: torch sees "
            f"{torch.cuda.device_count()} CUDA device(s)"
        )
    return torch.device("cuda", context.device_id)
