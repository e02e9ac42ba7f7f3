"""The ``parameters`` of Triton's PyTorch backend that mean something on this server.

* ``INFERENCE_MODE`` (default true): run under ``torch.inference_mode`` rather than only ``no_grad``;
* ``DISABLE_OPTIMIZED_EXECUTION`` (default false): turn off the TorchScript graph executor's
  optimizations, whose first calls can be very slow;
* ``ENABLE_WEIGHT_SHARING`` (default false): a model's instances on one device share one loaded
  program (see :mod:`naiad.backends.pytorch.loads`);
* ``INTRA_OP_THREAD_COUNT`` / ``INTER_OP_THREAD_COUNT``: torch's two thread pools.  They are
  process-wide in torch, so, as in Triton, the first model that sets one wins and later values are
  ignored (with a log line saying so).  The intra-op count is, underneath, an OpenMP and MKL setting
  of the calling thread: set on the thread that loads a model, it would not reach the instance threads
  that run it, so :func:`apply_intra_op_threads` applies it on each executing thread.

Values are read with Triton's parsers and errors, so a config that loads there loads here.  Other
Triton keys (``ENABLE_JIT_PROFILING``, ``ENABLE_CACHE_CLEANING``...) tune libtorch internals this
server does not use and are ignored.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from naiad.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

log = logging.getLogger("naiad.backends.pytorch")

_THREADS_LOCK = threading.Lock()
#: Thread pool settings already applied in this process: parameter name -> value.
_THREADS_SET: dict[str, int] = {}
#: The intra-op thread count applied on the current thread (``threads`` is absent until then).
_THREAD_STATE = threading.local()


@dataclass(frozen=True, slots=True)
class Options:
    """How one model's calls run."""

    inference_mode: bool = True
    optimized_execution: bool = True
    weight_sharing: bool = False
    #: Whether the config sets ``ENABLE_WEIGHT_SHARING`` (Triton logs the setting only then).
    weight_sharing_given: bool = False


def read_options(config: mc.ModelConfig) -> Options:
    """The model's options; applies its thread counts if it is the first model to set them."""
    params = {key: value.string_value for key, value in config.parameters.items()}
    options = Options(
        inference_mode=_bool(params, "INFERENCE_MODE", True),
        optimized_execution=not _bool(params, "DISABLE_OPTIMIZED_EXECUTION", False),
        weight_sharing=_bool(params, "ENABLE_WEIGHT_SHARING", False),
        weight_sharing_given="ENABLE_WEIGHT_SHARING" in params,
    )
    intra = _int(params, "INTRA_OP_THREAD_COUNT")
    if intra > 0:
        _set_threads("INTRA_OP_THREAD_COUNT", intra, torch.set_num_threads, config.name)
    inter = _int(params, "INTER_OP_THREAD_COUNT")
    if inter > 0:
        _set_threads("INTER_OP_THREAD_COUNT", inter, torch.set_num_interop_threads, config.name)
    return options


def apply_intra_op_threads() -> None:
    """Give the calling thread the process-wide ``INTRA_OP_THREAD_COUNT``, if a model set one."""
    wanted = _THREADS_SET.get("INTRA_OP_THREAD_COUNT")
    if wanted is not None and getattr(_THREAD_STATE, "threads", None) != wanted:
        torch.set_num_threads(wanted)
        _THREAD_STATE.threads = wanted


def _set_threads(key: str, value: int, apply: Callable[[int], None], model: str) -> None:
    with _THREADS_LOCK:
        if key in _THREADS_SET:
            if _THREADS_SET[key] != value:
                log.warning(
                    "%s=%d of model '%s' is ignored: torch's thread pools are process-wide and already "
                    "use %d",
                    key,
                    value,
                    model,
                    _THREADS_SET[key],
                )
            return
        try:
            apply(value)
        except RuntimeError as exc:  # inter-op threads are fixed once torch has run parallel work
            log.warning("%s=%d of model '%s' could not be applied: %s", key, value, model, exc)
            return
        _THREADS_SET[key] = value
        log.info("%s is set to %d (for model '%s')", key, value, model)


def _bool(params: dict[str, str], key: str, default: bool) -> bool:
    if key not in params:
        return default
    value = params[key]
    lowered = value.lower()
    if lowered in ("true", "on", "1"):
        return True
    if lowered in ("false", "off", "0"):
        return False
    raise InvalidArgumentError(f"failed to convert '{value}' to boolean (parameter '{key}')")


def _int(params: dict[str, str], key: str) -> int:
    if key not in params:
        return -1
    try:
        return int(params[key])
    except ValueError:
        raise InvalidArgumentError(
            f"failed to convert '{params[key]}' to integral number (parameter '{key}')"
        ) from None
