"""What the instances of one loaded model version share: its option log lines and, with
``ENABLE_WEIGHT_SHARING``, one loaded program per device.

Triton's PyTorch backend reads a model's parameters once per model and logs what they set
("Inference Mode is enabled for model instance '<model>'"); with ``ENABLE_WEIGHT_SHARING`` it loads
the TorchScript file once per device for all the model's instances ("Reusing TorchScript model for
instance '<instance>'"), so sixteen instances hold one copy of the weights.  Their ``forward`` calls
then run on one module at once, which inference allows (Triton relies on it too).  A load's entry
lives while one of its instances does, so a reload with new files loads them anew.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from naiad.backends.base import InstanceContext
from naiad.backends.pytorch.options import Options
from naiad.backends.pytorch.program import Program

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

log = logging.getLogger("naiad.backends.pytorch")


@dataclass(slots=True, eq=False)
class _Load:
    #: The version's config, held so that its ``id`` (part of the key) is not reused meanwhile.
    config: mc.ModelConfig
    programs: dict[str, Program] = field(default_factory=dict)
    instances: int = 0


class Loads:
    """The model versions this backend has instances of, by (model, version, config object)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loads: dict[tuple[str, int, int], _Load] = {}

    def program(
        self, context: InstanceContext, options: Options, device: str, load: Callable[[], Program]
    ) -> tuple[Program, Callable[[], None]]:
        """The program for a new instance on ``device`` (``load`` makes one when it is not shared
        or not loaded yet there) and what to call when the instance closes."""
        key = (context.model_name, context.model_version, id(context.config))
        with self._lock:
            entry = self._loads.get(key)
            if entry is None:
                entry = self._loads[key] = _Load(context.config)
                _log_options(context.model_name, options)
            entry.instances += 1
            shared = entry.programs.get(device) if options.weight_sharing else None
        if shared is not None:
            log.info("Reusing TorchScript model for instance '%s'", context.instance_name)
            return shared, lambda: self._release(key)
        try:
            program = load()
        except BaseException:
            self._release(key)
            raise
        if options.weight_sharing:
            with self._lock:
                entry.programs.setdefault(device, program)
        return program, lambda: self._release(key)

    def _release(self, key: tuple[str, int, int]) -> None:
        with self._lock:
            entry = self._loads.get(key)
            if entry is not None:
                entry.instances -= 1
                if entry.instances <= 0:
                    del self._loads[key]


def _log_options(model: str, options: Options) -> None:
    """Triton's lines (it says "model instance" and names the model)."""
    said = "enabled" if options.optimized_execution else "disabled"
    log.info("Optimized execution is %s for model instance '%s'", said, model)
    said = "enabled" if options.inference_mode else "disabled"
    log.info("Inference Mode is %s for model instance '%s'", said, model)
    if options.weight_sharing_given:
        said = "enabled" if options.weight_sharing else "disabled"
        log.info("Weight sharing is %s for model instance '%s'", said, model)
