"""Opening an ``InferenceSession`` the way Triton's onnxruntime backend configures one.

Session options come from the config's ``parameters`` under the names Triton uses
(``intra_op_thread_count``, ``execution_mode``...) and from ``optimization { graph { level } }``;
execution providers from the instance kind and ``optimization { execution_accelerators }``.  Keeping
the names means a Triton ``config.pbtxt`` tunes ONNX Runtime here exactly as it does there.

Threads: each session has thread pools of its own, as in Triton, unless the server *shares* ONNX
Runtime's process-wide pools (:func:`share_thread_pools`; Triton's
``--backend-config=onnxruntime,enable-global-threadpool=1``), which a server that loads and evicts
models while it serves does (:mod:`naiad.app`).  Destroying a session with pools of its own joins
their threads *while holding the GIL* (ORT's Python binding frees the session under it): each
eviction then stalled the event loop, and so every warm request, for up to tens of milliseconds on a
busy 2-core machine (benchmarks/density, sixth session).  With shared pools a session owns no thread.
ORT then refuses per-session pools, so ``intra_op_thread_count`` / ``inter_op_thread_count`` are
ignored (with a warning), as Triton ignores them with its global pool.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import onnxruntime as ort
from onnxruntime.capi import _pybind_state

from naiad.core.errors import InternalError, InvalidArgumentError, UnavailableError

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

log = logging.getLogger("naiad")

#: ``optimization { graph { level } }`` -> ORT level (Triton: -1 basic, 1 extended, 2 disabled).
_GRAPH_LEVEL = {
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}

#: TensorRT accelerator parameters whose ORT option has another name (the rest keep theirs).
_TRT_RENAMED = {
    "max_workspace_size_bytes": "trt_max_workspace_size",
    "int8_calibration_table_name": "trt_int8_calibration_table_name",
    "int8_use_native_calibration_table": "trt_int8_use_native_calibration_table",
}

#: Deprecated CUDA options Triton still reads from ``parameters``: key -> {config value: ORT value}
#: (an empty table passes the value through).
_CUDA_PARAMETERS: dict[str, dict[str, str]] = {
    "cudnn_conv_algo_search": {"0": "EXHAUSTIVE", "1": "HEURISTIC", "2": "DEFAULT"},
    "arena_extend_strategy": {"0": "kNextPowerOfTwo", "1": "kSameAsRequested"},
    "gpu_mem_limit": {},
    "do_copy_in_default_stream": {},
}

#: Model-wide session config entries Triton forwards verbatim.
_SESSION_ENTRIES = ("session.use_device_allocator_for_initializers",)
#: Run config entries Triton forwards verbatim.
_RUN_ENTRIES = ("memory.enable_memory_arena_shrinkage",)

#: The file Triton loads when the model artifact is a directory (models with external weights).
MODEL_FILENAME = "model.onnx"

Provider = str | tuple[str, dict[str, str]]


def resolve_model_path(model_file: Path, model_name: str) -> Path:
    """The ``.onnx`` file to load: ``model_file`` itself, or ``model.onnx`` inside it."""
    path = model_file / MODEL_FILENAME if model_file.is_dir() else model_file
    if not path.is_file():
        raise UnavailableError(f"unable to find '{path}' for model '{model_name}'")
    return path


def open_session(
    path: Path, options: ort.SessionOptions, providers: list[Provider], model_name: str
) -> ort.InferenceSession:
    """An ``InferenceSession`` using every provider asked for.

    ORT quietly falls back to the CPU when a provider fails to start (a missing CUDA or cuDNN
    library), which would serve a GPU instance at CPU speed; that is reported as UNAVAILABLE instead.
    """
    try:
        session = ort.InferenceSession(str(path), sess_options=options, providers=providers)
    except Exception as exc:  # ORT raises its own exception types, none shared but Exception
        raise InternalError(f"unable to load model '{model_name}': {exc}") from exc
    wanted = [p if isinstance(p, str) else p[0] for p in providers]
    missing = [name for name in wanted if name not in session.get_providers()]
    if missing:
        raise UnavailableError(
            f"unable to load model '{model_name}': {', '.join(missing)} could not be started "
            "(usually a CUDA, cuDNN or TensorRT library that cannot be found)"
        )
    return session


def share_thread_pools(intra_op_threads: int = 0, inter_op_threads: int = 0) -> None:
    """Make the process-wide pools (0: ORT's default size, a thread per core) before any session of
    this process opens; from then on every session must use them (:func:`session_options` with
    ``shared``).  Once per process: ORT refuses to make them again, and load threads may ask side
    by side (the first one's sizes stay)."""
    global _pools_made
    with _pools_lock:
        if not _pools_made:
            _pybind_state.set_global_thread_pool_sizes(intra_op_threads, inter_op_threads)
            _pools_made = True


_pools_lock = threading.Lock()
_pools_made = False


def metadata_session(path: Path, model_name: str, shared: bool = False) -> ort.InferenceSession:
    """A CPU session with graph optimization off: the cheapest way to read a model's I/O."""
    options = ort.SessionOptions()
    options.use_per_session_threads = not shared
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return open_session(path, options, ["CPUExecutionProvider"], model_name)


def session_options(config: mc.ModelConfig, shared: bool = False) -> ort.SessionOptions:
    """Session options from the config, with Triton's defaults (all graph optimizations on); with
    ``shared``, on the process-wide thread pools."""
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors reach clients as responses; ORT's warnings are noise
    level = config.optimization.graph.level if config.optimization.HasField("graph") else 0
    options.graph_optimization_level = _GRAPH_LEVEL.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    params = parameters(config)
    mode = _int(params, "execution_mode", 0)
    if mode not in (0, 1):
        raise InvalidArgumentError(
            "Invalid configuration value provided. Expected values for  execution_mode are 0 or 1 "
            f"but got {mode} ."
        )
    options.execution_mode = ort.ExecutionMode.ORT_PARALLEL if mode else ort.ExecutionMode.ORT_SEQUENTIAL
    intra = _int(params, "intra_op_thread_count", 0)
    if intra > 0:
        options.intra_op_num_threads = intra
    inter = _int(params, "inter_op_thread_count", 0)
    if inter > 0:
        options.inter_op_num_threads = inter
    if shared:
        options.use_per_session_threads = False
        if intra > 0 or inter > 0:
            log.warning(
                "model '%s': intra_op_thread_count / inter_op_thread_count ignored: this server runs "
                "every ONNX Runtime session on the process-wide thread pools",
                config.name,
            )
    if "enable_mem_arena" in params:
        options.enable_cpu_mem_arena = parse_bool(params["enable_mem_arena"])
    if "enable_mem_pattern" in params:
        options.enable_mem_pattern = parse_bool(params["enable_mem_pattern"])
    for key in _SESSION_ENTRIES:
        if key in params:
            options.add_session_config_entry(key, params[key])
    return options


def run_options(config: mc.ModelConfig) -> ort.RunOptions:
    """Per-run options (arena shrinkage) from the config's ``parameters``."""
    options = ort.RunOptions()
    params = parameters(config)
    for key in _RUN_ENTRIES:
        if key in params:
            options.add_run_config_entry(key, params[key])
    return options


def providers(config: mc.ModelConfig, kind: str, device_id: int) -> list[Provider]:
    """Execution providers in priority order for an instance of ``kind`` on ``device_id``.

    GPU instances get CUDA (after TensorRT when the config asks for it, as Triton spells it); CPU
    instances get the CPU provider, after OpenVINO when asked for.  A provider this ``onnxruntime``
    build lacks makes the instance UNAVAILABLE, naming the package that has it.
    """
    available = set(ort.get_available_providers())
    accelerators = config.optimization.execution_accelerators
    chosen: list[Provider] = []
    if kind == "GPU":
        if "CUDAExecutionProvider" not in available:
            raise UnavailableError(
                f"unable to load model '{config.name}' on GPU {device_id}: the installed onnxruntime "
                f"has no CUDAExecutionProvider (it has {', '.join(sorted(available))}); install "
                "onnxruntime-gpu (pip install 'naiad[gpu]') or use KIND_CPU"
            )
        cuda = _deprecated_cuda_options(parameters(config))
        for accelerator in accelerators.gpu_execution_accelerator:
            if accelerator.name == "tensorrt":
                if "TensorrtExecutionProvider" not in available:
                    raise UnavailableError(
                        f"unable to load model '{config.name}': the TensorRT execution accelerator is "
                        "requested but the installed onnxruntime has no TensorrtExecutionProvider"
                    )
                chosen.append(("TensorrtExecutionProvider", _tensorrt_options(accelerator, device_id)))
            elif accelerator.name == "cuda":
                cuda.update(accelerator.parameters)
            else:
                raise InvalidArgumentError(f"unknown Execution Accelerator '{accelerator.name}' is requested")
        cuda["device_id"] = str(device_id)
        chosen.append(("CUDAExecutionProvider", cuda))
    for accelerator in accelerators.cpu_execution_accelerator:
        if accelerator.name != "openvino":
            raise InvalidArgumentError(f"unknown Execution Accelerator '{accelerator.name}' is requested")
        if "OpenVINOExecutionProvider" not in available:
            raise UnavailableError(
                f"unable to load model '{config.name}': the OpenVINO execution accelerator is requested "
                "but the installed onnxruntime has no OpenVINOExecutionProvider"
            )
        chosen.append(("OpenVINOExecutionProvider", {"device_type": "CPU"}))
    chosen.append("CPUExecutionProvider")
    return chosen


def parameters(config: mc.ModelConfig) -> dict[str, str]:
    """The config's ``parameters`` map as plain strings."""
    return {key: value.string_value for key, value in config.parameters.items()}


def _deprecated_cuda_options(params: dict[str, str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for key, table in _CUDA_PARAMETERS.items():
        if key not in params:
            continue
        value = params[key]
        if table and value not in table:
            raise InvalidArgumentError(f"unsupported {key} value '{value}' is requested")
        options[key] = table.get(value, value)
    return options


def _tensorrt_options(
    accelerator: mc.ModelOptimizationPolicy.ExecutionAccelerators.Accelerator, device_id: int
) -> dict[str, str]:
    options: dict[str, str] = {}
    for key, value in accelerator.parameters.items():
        if key == "precision_mode":
            if value == "FP16":
                options["trt_fp16_enable"] = "True"
            elif value == "INT8":
                options["trt_int8_enable"] = "True"
            elif value != "FP32":
                raise InvalidArgumentError(
                    f"unsupported precision mode '{value}' is requested (FP32, FP16 or INT8)"
                )
        elif key in _TRT_RENAMED:
            options[_TRT_RENAMED[key]] = value
        elif key.startswith("trt_"):
            options[key] = value
        else:
            raise InvalidArgumentError(
                f"unknown parameter '{key}' is provided for TensorRT Execution Accelerator"
            )
    options["device_id"] = str(device_id)
    return options


def _int(params: dict[str, str], key: str, default: int) -> int:
    if key not in params:
        return default
    try:
        return int(params[key])
    except ValueError:
        raise InvalidArgumentError(
            f"failed to convert '{params[key]}' to integral number (parameter '{key}')"
        ) from None


def parse_bool(value: str) -> bool:
    """A boolean as Triton's backends read one (``true``/``on``/``1``, ``false``/``off``/``0``)."""
    lowered = value.lower()
    if lowered in ("true", "on", "1"):
        return True
    if lowered in ("false", "off", "0"):
        return False
    raise InvalidArgumentError(f"failed to convert '{value}' to boolean")
