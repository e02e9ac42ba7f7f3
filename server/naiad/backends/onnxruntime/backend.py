"""The ``onnxruntime`` backend object the registry hands out: auto-complete and instance creation."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from naiad.backends.base import InstanceContext, ModelInstance
from naiad.backends.onnxruntime import autocomplete, session
from naiad.backends.onnxruntime.bindings import bind_inputs, bind_outputs
from naiad.backends.onnxruntime.instance import OnnxRuntimeInstance
from naiad.backends.onnxruntime.tensors import model_tensors
from naiad.backends.settings import BackendSettings
from naiad.core.atoi import stoi
from naiad.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

    from naiad.backends.runtime import Runtime

log = logging.getLogger(__name__)


class OnnxRuntimeBackend:
    """Serves ``.onnx`` models with ONNX Runtime, one ``InferenceSession`` per instance.

    Reads Triton's ``--backend-config`` settings for ``onnxruntime`` (see
    :mod:`naiad.backends.settings`): ``default-max-batch-size``, the ``max_batch_size`` auto-complete
    gives a model that can batch but whose config says none; ``enable-global-threadpool`` (with
    ``intra_op_thread_count`` and ``inter_op_thread_count``), every session on ONNX Runtime's
    process-wide thread pools, as the runtime's ``shared_onnx_threads`` also asks (see
    :mod:`naiad.backends.onnxruntime.session`).  A setting that does not parse fails the backend,
    and so each model that needs it, with Triton's words.
    """

    name = "onnxruntime"

    def __init__(self, runtime: Runtime | None = None) -> None:
        given = runtime.settings if runtime is not None else BackendSettings()
        log.info("backend configuration:\n%s", given.describe(self.name))
        settings = given.of(self.name)
        self.default_max_batch_size = _integer(settings["default-max-batch-size"])
        global_pools = session.parse_bool(settings.get("enable-global-threadpool", "false"))
        self.shared_threads = global_pools or (runtime is not None and runtime.shared_onnx_threads)
        if self.shared_threads:
            sizes = ("intra_op_thread_count", "inter_op_thread_count")  # (0 or less: ORT's own)
            intra, inter = (_integer(settings.get(key, "0")) if global_pools else 0 for key in sizes)
            session.share_thread_pools(max(intra, 0), max(inter, 0))

    def auto_complete(self, config: mc.ModelConfig, model_dir: Path, version_dir: Path | None) -> None:
        """Fill names, datatypes, dims, ``max_batch_size`` and batching from the highest version."""
        model_name = config.name or model_dir.name
        if not autocomplete.needs_model(config) or version_dir is None:
            autocomplete.fill_platform(config)
            return
        filename = config.default_model_filename or session.MODEL_FILENAME
        path = session.resolve_model_path(version_dir / filename, model_name)
        reader = session.metadata_session(path, model_name, self.shared_threads)
        autocomplete.complete(
            config,
            model_tensors(reader.get_inputs()),
            model_tensors(reader.get_outputs()),
            model_name,
            self.default_max_batch_size,
        )

    def create_instance(self, context: InstanceContext) -> ModelInstance:
        """Open the session on the instance's device and check the config against the model."""
        config = context.config
        path = session.resolve_model_path(context.model_file, context.model_name)
        loaded = session.open_session(
            path,
            session.session_options(config, self.shared_threads),
            session.providers(config, context.kind, context.device_id),
            context.model_name,
        )
        inputs = bind_inputs(
            config,
            model_tensors(loaded.get_inputs()),
            model_tensors(loaded.get_overridable_initializers()),
        )
        outputs = bind_outputs(config, model_tensors(loaded.get_outputs()))
        return OnnxRuntimeInstance(context, loaded, session.run_options(config), inputs, outputs)


def _integer(text: str) -> int:
    """A setting read as Triton's backends read numbers (``std::stoi``)."""
    try:
        return stoi(text)
    except ValueError:
        raise InvalidArgumentError(f"failed to convert '{text}' to integral number") from None
