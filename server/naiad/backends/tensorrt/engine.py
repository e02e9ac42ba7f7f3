"""Deserializing a plan with the TensorRT runtime and describing its tensors.

An engine is built for one GPU architecture and TensorRT version; deserialization fails otherwise, and
TensorRT says why only through its logger, so the logger here keeps the last error for the load
message.  The engine is deserialized on the instance's device, which owns its weights.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorrt as trt
import torch

from naiad.backends.tensorrt.tensors import EngineTensor, ProfileShapes
from naiad.core.errors import InternalError, UnavailableError

log = logging.getLogger("naiad.backends.tensorrt")


class _Logger(trt.ILogger):  # type: ignore[misc]
    """TensorRT's messages into the server log; remembers the last error for load failures."""

    def __init__(self) -> None:
        trt.ILogger.__init__(self)
        self.last_error = ""

    def log(self, severity: Any, msg: str) -> None:
        if severity in (trt.ILogger.INTERNAL_ERROR, trt.ILogger.ERROR):
            self.last_error = msg
            log.error("TensorRT: %s", msg)
        elif severity == trt.ILogger.WARNING:
            log.warning("TensorRT: %s", msg)


@dataclass(frozen=True, slots=True)
class Engine:
    """A deserialized ``ICudaEngine`` with the runtime and logger it must not outlive."""

    engine: Any
    runtime: Any
    logger: _Logger


def load_engine(path: Path, device_id: int, model_name: str) -> Engine:
    """The engine in ``path``, deserialized on GPU ``device_id``."""
    if not path.is_file():
        raise UnavailableError(f"unable to find '{path}' for model instance '{model_name}'")
    _plugin_logger()
    logger = _Logger()
    with torch.cuda.device(device_id):
        runtime = trt.Runtime(logger)
        engine = runtime.deserialize_cuda_engine(path.read_bytes())
    if engine is None:
        raise InternalError(
            f"unable to load model '{model_name}': TensorRT {trt.__version__} cannot deserialize '{path}' "
            f"(an engine runs only with the TensorRT version and GPU it was built for): {logger.last_error}"
        )
    return Engine(engine, runtime, logger)


def describe(engine: Any) -> list[EngineTensor]:
    """The engine's I/O tensors, in engine order, with each input's shapes under every profile."""
    profile_count = engine.num_optimization_profiles
    described: list[EngineTensor] = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        profiles: tuple[ProfileShapes, ...] = ()
        if is_input:
            profiles = tuple(
                ProfileShapes(*(tuple(shape) for shape in engine.get_tensor_profile_shape(name, p)))
                for p in range(profile_count)
            )
        described.append(
            EngineTensor(
                name=name,
                is_input=is_input,
                trt_type=engine.get_tensor_dtype(name).name,
                shape=tuple(engine.get_tensor_shape(name)),
                profiles=profiles,
                is_shape_tensor=bool(engine.is_shape_inference_io(name)),
            )
        )
    return described


@functools.cache
def _plugin_logger() -> _Logger:
    """Register TensorRT's standard plugins once, as Triton does, so engines using them deserialize."""
    logger = _Logger()
    trt.init_libnvinfer_plugins(logger, "")
    return logger
