"""The ``tensorrt`` backend object the registry hands out: auto-complete and instance creation.

Importing this module imports TensorRT and torch; on a host without them the registry reports the
model UNAVAILABLE with that reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from naiad.backends.base import InstanceContext, ModelInstance
from naiad.backends.tensorrt import autocomplete
from naiad.backends.tensorrt.bindings import bind
from naiad.backends.tensorrt.engine import describe, load_engine
from naiad.backends.tensorrt.instance import TensorRTInstance
from naiad.backends.tensorrt.profiles import group_profiles
from naiad.core.errors import UnavailableError

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

MODEL_FILENAME = "model.plan"


class TensorRTBackend:
    """Serves TensorRT plans, one deserialized engine per instance, on the instance's GPU."""

    name = "tensorrt"

    def auto_complete(self, config: mc.ModelConfig, model_dir: Path, version_dir: Path | None) -> None:
        """Fill names, datatypes, dims, ``max_batch_size`` and batching from the engine (on GPU 0)."""
        if version_dir is None or (config.input and config.output) or not torch.cuda.is_available():
            if not config.platform:
                config.platform = autocomplete.PLATFORM
            return
        path = version_dir / (config.default_model_filename or MODEL_FILENAME)
        engine = load_engine(path, 0, config.name or model_dir.name)
        autocomplete.complete(config, describe(engine.engine))

    def create_instance(self, context: InstanceContext) -> ModelInstance:
        """Deserialize the engine on the instance's GPU and check the config against it."""
        config = context.config
        if context.kind != "GPU":
            raise UnavailableError(
                f"unable to load model '{context.model_name}': a TensorRT plan runs only on a GPU, and "
                f"instance '{context.instance_name}' is KIND_{context.kind} (use KIND_GPU, on a GPU host)"
            )
        path = _model_file(context)
        engine = load_engine(path, context.device_id, context.model_name)
        described = describe(engine.engine)
        profiles = group_profiles(config, context.instance_name, engine.engine.num_optimization_profiles)
        inputs, outputs = bind(config, described, profiles)
        return TensorRTInstance(context, engine, described, profiles, inputs, outputs)


def _model_file(context: InstanceContext) -> Path:
    """``cc_model_filenames`` picks a plan per compute capability (``"8.0"``), as in Triton."""
    major, minor = torch.cuda.get_device_capability(context.device_id)
    chosen = context.config.cc_model_filenames.get(f"{major}.{minor}")
    return context.version_dir / chosen if chosen else context.model_file
