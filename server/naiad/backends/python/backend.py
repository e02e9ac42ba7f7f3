"""The ``python`` backend: Triton Python-backend ``model.py`` files, run unchanged.

Every instance runs in a model process of its own by default (:mod:`naiad.backends.python.process`),
as Triton gives every instance a stub process: the engine never runs model code, so a model that
crashes, hangs or eats memory costs only its own requests.  A trusted model can opt into running
inside the engine (config parameter ``NAIAD_INSTANCE_PROCESSES: "false"``), the fastest path: then
a :class:`PythonModelInstance` hosts it on the instance's own thread.  The same class hosts it inside
the model process, so both behave the same way.  This module is the engine side of the host: it
turns server requests into ``pb_utils`` requests and the model's responses back into server results.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf import json_format

from naiad.backends.base import InstanceContext
from naiad.backends.python import bls, pb_utils
from naiad.backends.python.custom_metrics import CustomMetrics
from naiad.backends.python.instance import PythonModelInstance
from naiad.backends.python.launcher import Launcher
from naiad.backends.python.process import ProcessModelInstance
from naiad.backends.python.spec import ModelSpec, ProcessOptions
from naiad.backends.runtime import PYTHON_RUNTIME, Runtime
from naiad.codecs.model_config_json import config_to_dict
from naiad.core.datatypes import WIRE_DTYPE
from naiad.core.errors import InvalidArgumentError
from naiad.core.signature import TensorSpec

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

log = logging.getLogger(__name__)

DEFAULT_MODEL_FILE = "model.py"

#: Characters Triton's Python backend refuses in a stub's name (its ``INVALID_CHARS``): it starts each
#: stub through a shell, so the model and instance names must not carry shell syntax.
INVALID_STUB_NAME_CHARS = frozenset(";|&$`<>()[]{}\\\"'*?~#!")


def check_stub_name(name: str) -> None:
    """Refuse a model or instance name Triton's Python backend refuses (with its INVALID_ARG message).

    Naiad starts no shell, but a model that loads here must load in Triton too: Triton 2.51 hangs or
    runs the shell's reading of such a name, NVIDIA's current Python backend (and its
    ``L0_backend_python/model_control`` test) refuses it, and so do we.
    """
    if not name or not INVALID_STUB_NAME_CHARS.isdisjoint(name):
        raise InvalidArgumentError("Invalid stub name: contains invalid characters")


def model_spec(context: InstanceContext) -> ModelSpec:
    """The :class:`ModelSpec` of the instance ``context`` describes, with the seven string arguments
    Triton passes to ``initialize`` (``model_repository`` is the model's own folder, as in Triton)."""
    args = {
        "model_config": json.dumps(config_to_dict(context.config)),
        "model_instance_kind": context.kind,
        "model_instance_name": context.instance_name,
        "model_instance_device_id": str(context.device_id),
        "model_repository": str(context.model_dir),
        "model_version": str(context.model_version),
        "model_name": context.model_name,
    }
    return ModelSpec(
        model_file=context.model_file,
        model_name=context.model_name,
        model_version=str(context.model_version),
        instance_name=context.instance_name,
        args=args,
        outputs=tuple(spec.name for spec in context.signature.outputs),
        decoupled=bool(context.config.model_transaction_policy.decoupled),
        output_bytes=tuple(
            (spec.name, WIRE_DTYPE[spec.datatype].itemsize * math.prod(spec.dims))
            for spec in context.signature.outputs
            if spec.datatype in WIRE_DTYPE and all(dim >= 0 for dim in spec.dims)
        ),
        max_batch_size=context.signature.max_batch_size,
        input_reshapes=_reshapes(context.signature.inputs),
        output_reshapes=_reshapes(context.signature.outputs),
    )


def _reshapes(specs: Iterable[TensorSpec]) -> tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]:
    return tuple((spec.name, spec.dims, spec.reshape) for spec in specs if spec.reshape is not None)


class PythonBackend:
    """Completes configs with ``auto_complete_config`` and creates instances, in model processes
    started from one template process (see :mod:`naiad.backends.python.zygote`) unless a model opts
    into the engine."""

    name = "python"

    def __init__(self, runtime: Runtime) -> None:
        # (Triton's Python backend logs what it was given; Naiad's reads none of its settings, which
        # size Triton's shared-memory pools and stub timeouts)
        log.info("backend configuration:\n%s", runtime.settings.describe(self.name))
        self._runtime = runtime
        self._launcher = Launcher()
        #: ``pb_utils.MetricFamily`` of every Python model, exported on ``/metrics``.
        self.custom_metrics = CustomMetrics()
        #: What models in the engine reach through ``pb_utils``: this store, and the runtime's BLS
        #: server for their BLS calls (a model process binds its own).
        self._services = pb_utils.ModelServices(self.custom_metrics.local, bls.Runner(runtime))

    def close(self) -> None:
        """Stop the model process template, once every model is closed (see ``Runtime.close``)."""
        self._launcher.close()

    def auto_complete(self, config: mc.ModelConfig, model_dir: Path, version_dir: Path | None) -> None:
        """Let ``TritonPythonModel.auto_complete_config`` fill the config, as Triton does, in a
        throwaway model process (importing ``model.py`` runs model code), or in the engine for a
        model that opted into it.

        The model sees the config as Triton renders it, with its name filled in (the repository may
        not have normalized it yet), and what it returns replaces the config, nothing added: the
        completed ``/config`` is Triton's, field for field (qa's ``compare_status.py`` checks it).
        """
        options = ProcessOptions.of(config, model_dir)
        if version_dir is None:
            return
        based = self._runtime.python_based(config.backend) if config.runtime == PYTHON_RUNTIME else None
        model_file = based or version_dir / (config.default_model_filename or DEFAULT_MODEL_FILE)
        if not model_file.is_file():
            return
        model_name = config.name or model_dir.name
        check_stub_name(model_name)
        current = config_to_dict(config)
        current["name"] = model_name
        completed = self._launcher.auto_complete(model_file, model_name, json.dumps(current), options)
        if completed is None:
            return
        replacement = type(config)()
        try:
            json_format.Parse(completed, replacement)
        except json_format.ParseError as exc:
            raise InvalidArgumentError(
                f"auto_complete_config of model '{model_name}' produced an invalid configuration: {exc}"
            ) from exc
        config.CopyFrom(replacement)

    def create_instance(self, context: InstanceContext) -> PythonModelInstance | ProcessModelInstance:
        """In a model process (the default), or in the engine for a model that opted into it."""
        check_stub_name(context.instance_name)
        options = ProcessOptions.of(context.config, context.model_dir)
        spec = model_spec(context)
        if options.in_process:
            services = pb_utils.ModelServices(self._services.metrics, self._services.bls, spec.version_dir)
            return PythonModelInstance(spec, services)
        return ProcessModelInstance(
            spec, options, self._launcher, self._runtime, context.health, self.custom_metrics
        )
