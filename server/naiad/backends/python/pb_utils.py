"""``triton_python_backend_utils``: the module Triton Python models import as ``pb_utils``.

Models written for Triton must run unchanged, so every public name here keeps Triton's spelling,
signature and behaviour (including its error messages where models or their tests may match them).
The backend installs this module in ``sys.modules`` under Triton's name before it imports a model.

Tensors are plain numpy arrays held by reference: inputs arrive as zero-copy views of the request
buffers and outputs leave as the arrays the model made, so nothing here copies tensor data.
"""

from __future__ import annotations

import contextvars
import enum
import itertools
import json
import logging
import struct
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from naiad.backends.python import dlpack
from naiad.backends.python.custom_metrics import MetricKind, MetricStore, Series
from naiad.codecs import bytes_tensor
from naiad.core import datatypes

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

#: ``TRITONSERVER_DataType`` numbers (the same as ``ModelConfig`` ``TYPE_*``), by protocol datatype.
_TYPE_NUMBER: dict[str, int] = {
    "BOOL": 1,
    "UINT8": 2,
    "UINT16": 3,
    "UINT32": 4,
    "UINT64": 5,
    "INT8": 6,
    "INT16": 7,
    "INT32": 8,
    "INT64": 9,
    "FP16": 10,
    "FP32": 11,
    "FP64": 12,
    "BYTES": 13,
    "BF16": 14,
}

#: Triton's table: config type name -> numpy type (``bool`` for BOOL, no BF16 entry).
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

_NUMPY_BY_NUMBER: dict[int, Any] = {
    number: TRITON_STRING_TO_NUMPY[datatypes.CONFIG_TYPE[name]]
    for name, number in _TYPE_NUMBER.items()
    if name != "BF16"
}
_NUMPY_BY_NUMBER[1] = np.bool_

#: Native numpy dtype -> protocol datatype, so that building an output tensor is one dict lookup.
_DATATYPE_BY_DTYPE: dict[np.dtype[Any], str] = {
    dtype: name for name, dtype in datatypes.NUMPY_DTYPE.items() if name != "BF16"
}

_LENGTH = struct.Struct("<I")


class TritonModelException(Exception):
    """The exception pb_utils raises for misuse; models raise it too, from any entry point."""

    def message(self) -> str:
        return str(self)


def _datatype_of(dtype: np.dtype[Any]) -> str:
    found = _DATATYPE_BY_DTYPE.get(dtype)
    if found is not None:
        return found
    if dtype.kind in ("S", "U"):
        return "BYTES"
    try:
        return datatypes.from_numpy(dtype)
    except ValueError as exc:
        raise TritonModelException(
            f"Tensor dtype {dtype} is not supported by the Python backend; use np.object_ for BYTES"
        ) from exc


class _Capsule:
    """Gives a bare DLPack capsule the ``__dlpack__`` protocol numpy consumes.

    numpy reads the device from the capsule itself and refuses non-CPU memory, so claiming CPU here
    only lets numpy make that check.
    """

    __slots__ = ("_capsule",)

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


class Tensor:
    """A named tensor backed by a numpy array (``np.object_`` of ``bytes`` for BYTES)."""

    __slots__ = ("_array", "_borrowed", "_datatype", "_name")

    def __init__(self, name: str, data: Any) -> None:
        if type(name) is not str:
            name = _argument("Tensor", "name", name, (str, bytes), "str")
        if data is None:
            raise TypeError("Tensor(): data must be a numpy array, got None")
        array = data if isinstance(data, np.ndarray) else np.asarray(data)
        self._name = name
        self._array = array
        self._datatype = _datatype_of(array.dtype)
        self._borrowed = False

    @classmethod
    def _wrap(cls, name: str, datatype: str, array: np.ndarray[Any, Any]) -> Tensor:
        """A tensor over the server's memory (a request's input, a BLS call's output), without
        re-deriving what the request already says."""
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = array
        tensor._datatype = datatype
        tensor._borrowed = True
        return tensor

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray[Any, Any]:
        """The array itself.  The server's (a request's inputs, a BLS call's outputs) is writable, as in
        Triton, where a model may work on its inputs in place (``x /= 255``): a view where the model
        may write (a model process's input region, or its copy-on-write mapping of a worker's arena;
        the arena itself, in the engine), copied here, once, where it may not (an HTTP body, a gRPC
        message, a decoupled model's inputs in an arena, another model's outputs).

        BF16 raises, as in Triton (models test for it): numpy has no bfloat16, so such tensors go
        through ``to_dlpack``/``from_dlpack``, which carry the ml_dtypes array held here.
        """
        if self._datatype == "BF16":
            raise TritonModelException(
                "Tensor dtype is BF16 and cannot be converted to NumPy. "
                "Use to_dlpack() and from_dlpack() instead."
            )
        array = self._array
        if self._borrowed and not array.flags.writeable:
            array = self._array = array.copy()
        return array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int:
        """The ``TRITONSERVER_DataType`` number (``TYPE_FP32`` is 11, BYTES is 13)."""
        return _TYPE_NUMBER[self._datatype]

    def is_cpu(self) -> bool:
        return True

    def _exportable(self) -> np.ndarray[Any, Any]:
        if self._datatype == "BYTES":
            raise TritonModelException("DLPack does not support BYTES tensors")
        return self._array

    def to_dlpack(self) -> Any:
        """A (legacy, unversioned) DLPack capsule over the tensor's memory.

        Legacy capsules cannot mark memory read-only, so a read-only input view is copied first.
        """
        array = self._exportable()
        array = array if array.flags.writeable else array.copy()
        return dlpack.export(array) if dlpack.is_bfloat16(array) else array.__dlpack__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        """The DLPack protocol; consumers that ask for a versioned capsule get read-only views as is."""
        array = self._exportable()
        if dlpack.is_bfloat16(array):  # numpy cannot export it: a legacy capsule of our own
            return dlpack.export(array if array.flags.writeable else array.copy())
        try:
            return array.__dlpack__(**kwargs)
        except BufferError:
            if array.flags.writeable:
                raise
            return array.copy().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        """A tensor over a DLPack capsule or any object with ``__dlpack__`` (CPU memory only)."""
        if capsule is None:
            raise TritonModelException(f"unable to read DLPack tensor '{name}': no capsule given (None)")
        if isinstance(capsule, Tensor) and dlpack.is_bfloat16(capsule._array):
            return Tensor(name, capsule._array)  # numpy cannot pass bfloat16 through DLPack
        if not hasattr(capsule, "__dlpack__"):
            bf16 = dlpack.import_bfloat16(capsule)  # a bfloat16 capsule (None, untouched, otherwise)
            if bf16 is not None:
                return Tensor(name, bf16)
        source = capsule if hasattr(capsule, "__dlpack__") else _Capsule(capsule)
        try:
            array = np.from_dlpack(source)
        except (BufferError, RuntimeError) as exc:  # numpy refuses bfloat16: read the producer's here
            bf16 = dlpack.import_bfloat16(capsule.__dlpack__()) if source is capsule else None
            if bf16 is None:
                raise TritonModelException(f"unable to read DLPack tensor '{name}': {exc}") from exc
            array = bf16
        except TypeError as exc:
            raise TritonModelException(f"unable to read DLPack tensor '{name}': {exc}") from exc
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {self._datatype}, shape={list(self._array.shape)})"


class TritonError:
    """A per-response error; ``code`` is one of the class constants (Triton's error codes)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    __slots__ = ("_code", "_message")

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


def _parameters_dict(parameters: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """Request/response parameters checked as Triton's constructors check them, with its messages.

    A JSON object string is also taken (Naiad's extension); anything else must be a mapping of str
    keys to bool, int or str values, which is all the parameters of a Triton response can carry.
    """
    if parameters is None or parameters == "":
        return {}
    if isinstance(parameters, str):
        loaded = json.loads(parameters)
        if not isinstance(loaded, dict):
            raise TritonModelException("parameters must be a JSON object")
        parameters = loaded
    if not isinstance(parameters, Mapping):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(f"Expect parameters keys to have type str, found type {type(key)}")
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return dict(parameters)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _argument(function: str, name: str, value: Any, types: tuple[type, ...], expected: str) -> Any:
    """``value`` (bytes as str) if it has one of ``types``; else the TypeError Triton's bindings
    raise for an argument of the wrong type (None included), since models test for it."""
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
        return _text(value) if isinstance(value, bytes) else value
    raise TypeError(f"{function}(): {name} must be {expected}, got {type(value).__name__}")


def _tensor_list(function: str, name: str, tensors: Any) -> list[Tensor]:
    """A list of tensors: not a sequence is a TypeError, a ``None`` in it a TritonModelException
    (as Triton's bindings raise them)."""
    if not isinstance(tensors, list | tuple):
        raise TypeError(f"{function}(): {name} must be a list of Tensor, got {type(tensors).__name__}")
    for tensor in tensors:
        if not isinstance(tensor, Tensor):
            raise TritonModelException(
                f"{function}(): {name} must hold Tensor objects, got {type(tensor).__name__}"
            )
    return tensors if isinstance(tensors, list) else list(tensors)


class InferenceRequest:
    """A request: what ``execute`` receives (built by the backend) or, later, a BLS request.

    The constructor is Triton's BLS signature; requests handed to ``execute`` are a subclass whose
    accessors read the server's request directly.
    """

    __slots__ = (
        "_correlation_id",
        "_flags",
        "_inputs",
        "_model_name",
        "_model_version",
        "_parameters",
        "_release_flags",
        "_request_id",
        "_requested_output_names",
        "_timeout",
    )

    def __init__(
        self,
        request_id: str | bytes = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str | bytes] = (),
        model_name: str | bytes = "",
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: Any = None,
        trace: Any = None,
        parameters: Mapping[str, Any] | str | None = None,
    ) -> None:
        # Triton's constructor takes std::string arguments, which pybind11 also fills from bytes:
        # NVIDIA's BLS example passes a BYTES tensor's element (bytes) as the model name.  Arguments
        # of other types raise its bindings' errors.
        text = (str, bytes)
        self._request_id: str = _argument("InferenceRequest", "request_id", request_id, text, "str")
        self._correlation_id: int | str = _argument(
            "InferenceRequest", "correlation_id", correlation_id, (int, str), "int or str"
        )
        self._inputs = _tensor_list("InferenceRequest", "inputs", inputs)
        if not isinstance(requested_output_names, list | tuple):
            raise TypeError(
                "InferenceRequest(): requested_output_names must be a list of str, got "
                f"{type(requested_output_names).__name__}"
            )
        self._requested_output_names = [
            _argument("InferenceRequest", "requested_output_names", name, text, "a list of str")
            for name in requested_output_names
        ]
        self._model_name: str = _argument("InferenceRequest", "model_name", model_name, text, "str")
        version = _argument("InferenceRequest", "model_version", model_version, (int,), "int")
        self._model_version: int = version
        self._flags: int = _argument("InferenceRequest", "flags", flags, (int,), "int")
        self._timeout: int = _argument("InferenceRequest", "timeout", timeout, (int,), "int")
        self._parameters = _parameters_dict(parameters)
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def requested_output_names(self) -> list[str]:
        return self._requested_output_names

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        """The request timeout in microseconds (0: none)."""
        return self._timeout

    def parameters(self) -> str:
        """The request parameters as a JSON object string (Triton hands models a string)."""
        return json.dumps(self._parameters)

    def model_name(self) -> str:
        return self._model_name

    def is_cancelled(self) -> bool:
        return False

    def set_release_flags(self, flags: int) -> None:
        """How ``execute`` releases this request: ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` runs it
        again in a later batch (a model with ``sequence_batching { iterative_sequence: true }``; its
        entry in the returned list must then be ``None``), ``..._RELEASE_ALL`` (the default) ends it."""
        self._release_flags = flags

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on its model (BLS): an ``InferenceResponse``, or with ``decoupled`` an
        iterator over the model's responses, the final one included.  Blocks the calling thread."""
        return _bls_runner().exec(self, decoupled)

    async def async_exec(self, decoupled: bool = False) -> Any:
        """:meth:`exec` without blocking: await it (several can be in flight at once)."""
        return await _bls_runner().async_exec(self, decoupled)


class BlsRunner(Protocol):
    """How BLS requests reach models: the engine's runner (:mod:`naiad.backends.python.bls`), or a
    model process's, which forwards them to the engine (see :class:`ModelServices`)."""

    def exec(self, request: InferenceRequest, decoupled: bool) -> Any: ...

    async def async_exec(self, request: InferenceRequest, decoupled: bool) -> Any: ...

    def model_control(self, message: tuple[Any, ...]) -> Any: ...


class ModelServices:
    """What a model's code reaches through this module without being handed it: where its BLS
    requests go and where its custom metrics are kept.

    Model code calls ``InferenceRequest.exec()`` or ``MetricFamily(...)`` with no handle on the
    server, so the code that runs a model binds its services to the calls it makes into the model
    (:data:`SERVICES`): the engine installs nothing on this module, and two servers in one process
    keep their models apart.  A model process, which serves one model, also binds them for the whole
    process (:func:`bind_process`), so threads the model starts (they begin with an empty context)
    find them as Triton's stub threads do.
    """

    __slots__ = ("bls", "metrics", "model_dir")

    def __init__(self, metrics: MetricStore, bls: BlsRunner | None = None, model_dir: str = "") -> None:
        self.metrics = metrics
        #: ``None`` until the model is served (a model process gets its channel after loading).
        self.bls = bls
        #: The model's version folder (what :func:`get_model_dir` answers).
        self.model_dir = model_dir


#: The services of the model whose code is running (set around each call into model code).
SERVICES: contextvars.ContextVar[ModelServices | None] = contextvars.ContextVar(
    "naiad_model_services", default=None
)
_process_services: ModelServices | None = None


def bind_process(services: ModelServices) -> None:
    """Bind ``services`` for every thread of this process: only a model process, the home of one
    model, does this (an engine hosts several models, which must not see each other's)."""
    global _process_services
    _process_services = services


def _services() -> ModelServices | None:
    services = SERVICES.get()
    return _process_services if services is None else services


def get_model_dir() -> str:
    """The folder of the model's version (``<repository>/<model>/<version>``), as Triton's stub
    answers it: where a Python-based backend's model finds its files (``model.json``)."""
    services = _services()
    if services is None or not services.model_dir:
        raise TritonModelException("get_model_dir() can only be called while the model is served")
    return services.model_dir


def _bls_runner() -> BlsRunner:
    services = _services()
    if services is None or services.bls is None:
        raise TritonModelException("BLS requests can only be made while the model is served")
    return services.bls


def load_model(model_name: str, config: str = "", files: Mapping[str, bytes] | None = None) -> None:
    """Load or reload a model (server in EXPLICIT mode), as the repository extension does: ``config``
    overrides its configuration (JSON), ``files`` (``"file:1/model.onnx"`` -> content) its folder."""
    name = _argument("load_model", "model_name", model_name, (str, bytes), "str")
    text = _argument("load_model", "config", config, (str, bytes), "str")
    contents = {str(path): bytes(content) for path, content in (files or {}).items()}
    _bls_runner().model_control(("load", name, text, contents))


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload a model (server in EXPLICIT mode), and with ``unload_dependents`` its ensembles."""
    name = _argument("unload_model", "model_name", model_name, (str, bytes), "str")
    _bls_runner().model_control(("unload", name, bool(unload_dependents)))


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether a request for the model (``model_version``: "" for the default) would be served now."""
    name = _argument("is_model_ready", "model_name", model_name, (str, bytes), "str")
    version = _argument("is_model_ready", "model_version", model_version, (str, bytes), "str")
    return bool(_bls_runner().model_control(("ready", name, version)))


class InferenceResponse:
    """One response: output tensors, or an error that fails only its own request."""

    __slots__ = ("_error", "_output_tensors", "_parameters")

    def __init__(
        self,
        output_tensors: Sequence[Tensor] = (),
        error: TritonError | None = None,
        parameters: Mapping[str, Any] | str | None = None,
    ) -> None:
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(f"InferenceResponse error must be a TritonError, got {type(error).__name__}")
        if type(output_tensors) is not list or None in output_tensors:  # (None: at C speed)
            output_tensors = _tensor_list("InferenceResponse", "output_tensors", output_tensors)
        self._output_tensors: list[Tensor] = output_tensors
        self._error = error
        self._parameters = _parameters_dict(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """The response parameters as a JSON object string."""
        return json.dumps(self._parameters)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    for tensor in inference_request.inputs():
        if tensor._name == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    for tensor in inference_response.output_tensors():
        if tensor._name == name:
            return tensor
    return None


def get_input_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The input's entry in the ``json.loads(args["model_config"])`` dict, or None."""
    entries: list[dict[str, Any]] = model_config.get("input", [])
    for properties in entries:
        if properties["name"] == name:
            return properties
    return None


def get_output_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The output's entry in the ``json.loads(args["model_config"])`` dict, or None."""
    entries: list[dict[str, Any]] = model_config.get("output", [])
    for properties in entries:
        if properties["name"] == name:
            return properties
    return None


def using_decoupled_model_transaction_policy(model_config: Mapping[str, Any]) -> bool:
    policy = model_config.get("model_transaction_policy")
    return bool(policy and policy.get("decoupled", False))


def triton_to_numpy_type(data_type: int) -> Any:
    """numpy type for a ``TYPE_*`` number; None for unknown numbers (and BF16, as in Triton)."""
    return _NUMPY_BY_NUMBER.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """``TYPE_*`` number for a numpy dtype or type; None when Triton has none."""
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.kind in ("O", "S"):
        return _TYPE_NUMBER["BYTES"]
    found = _DATATYPE_BY_DTYPE.get(dtype)
    return None if found is None else _TYPE_NUMBER[found]


def triton_string_to_numpy(triton_type_string: str) -> Any:
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor: np.ndarray[Any, Any]) -> bytes | None:
    """Length-prefix every element (row-major); None for non-bytes arrays, as in Triton."""
    if input_tensor.size == 0:
        return b""
    if input_tensor.dtype.kind not in ("O", "S"):
        return None
    return bytes_tensor.serialize(input_tensor)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray[Any, Any]:
    """Split length-prefixed elements back into a 1-D ``np.object_`` array of bytes."""
    items: list[bytes] = []
    view = memoryview(encoded_tensor)
    offset = 0
    while offset < len(view):
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        if offset + length > len(view):
            raise TritonModelException("serialized bytes tensor is truncated")
        items.append(bytes(view[offset : offset + length]))
        offset += length
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    return array


class ModelConfig:
    """The configuration ``auto_complete_config(auto_complete_model_config)`` receives and returns.

    Only the fields Triton lets auto-complete change have setters; a setting that contradicts the
    configuration file raises ``ValueError`` with Triton's message, which fails the model's load.
    """

    def __init__(self, model_config: str) -> None:
        self._model_config: dict[str, Any] = json.loads(model_config)
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def max_batch_size(self) -> int:
        return int(self._model_config["max_batch_size"])

    def set_max_batch_size(self, max_batch_size: int) -> None:
        if self._model_config["max_batch_size"] > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {self._model_config['max_batch_size']}, but "
                f"in auto-complete-config function for model '{self._name}' specified max_batch_size "
                f"{max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output, ("name", "data_type", "dims"))

    def _add_tensor(self, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> None:
        model = self._name
        if "name" not in tensor:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{model}' is missing 'name' property."
            )
        name = tensor["name"]
        if any(key not in allowed for key in tensor):
            listed = ", ".join(f"'{key}'" for key in allowed[:-1]) + f" and '{allowed[-1]}'"
            raise ValueError(
                f"{kind} '{name}' in auto-complete-config function for model '{model}' contains "
                f"property other than {listed}."
            )
        for required in ("data_type", "dims"):
            if required not in tensor:
                raise ValueError(
                    f"{kind} '{name}' in auto-complete-config function for model '{model}' is "
                    f"missing '{required}' property."
                )
        for current in self._model_config[kind]:
            if current["name"] != name:
                continue
            configured_type = current.get("data_type", "TYPE_INVALID")
            if configured_type != "TYPE_INVALID" and configured_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{model}', configuration expects datatype "
                    f"{configured_type} for {kind} '{name}', model provides {tensor['data_type']}"
                )
            if current.get("dims") and list(current["dims"]) != list(tensor["dims"]):
                raise ValueError(
                    f"model '{model}', tensor '{name}': the model expects dims {tensor['dims']} but "
                    f"the model configuration specifies dims {current['dims']}"
                )
            if "optional" in current and "optional" in tensor and current["optional"] != tensor["optional"]:
                raise ValueError(
                    f"model '{model}', tensor '{name}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional "
                    f"{current['optional']}"
                )
            current.update(tensor)
            return
        self._model_config[kind].append(dict(tensor))

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        if any(key != "decoupled" for key in transaction_policy_dict):
            raise ValueError(
                "model transaction property in auto-complete-config function for model "
                f"'{self._name}' contains property other than 'decoupled'."
            )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted


class LogLevel(enum.IntEnum):
    """Triton's log levels for :meth:`Logger.log`."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_PYTHON_LEVEL = {
    LogLevel.INFO: logging.INFO,
    LogLevel.WARNING: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
    LogLevel.VERBOSE: logging.DEBUG,
}

_model_log = logging.getLogger("naiad.python_backend")


class Logger:
    """Model logging, routed to the server's log through Python ``logging``."""

    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: LogLevel = LogLevel.INFO) -> None:
        if not isinstance(level, LogLevel):  # (Triton's bindings take no plain int)
            raise TypeError(f"Logger.log(): level must be a pb_utils.LogLevel, got {type(level).__name__}")
        _model_log.log(_PYTHON_LEVEL[level], "%s", _message("log", message))

    @staticmethod
    def log_info(message: str) -> None:
        _model_log.info("%s", _message("log_info", message))

    @staticmethod
    def log_warn(message: str) -> None:
        _model_log.warning("%s", _message("log_warn", message))

    @staticmethod
    def log_error(message: str) -> None:
        _model_log.error("%s", _message("log_error", message))

    @staticmethod
    def log_verbose(message: str) -> None:
        _model_log.debug("%s", _message("log_verbose", message))


def _message(function: str, message: Any) -> str:
    return str(_argument(f"Logger.{function}", "message", message, (str, bytes), "str"))


def _metric_store() -> MetricStore:
    services = _services()
    if services is None:
        raise TritonModelException("Custom metrics can only be created while the model is served")
    return services.metrics


class MetricFamily:
    """A family of custom metrics, exported on the server's ``/metrics`` (``COUNTER``, ``GAUGE`` or
    ``HISTOGRAM``).  Families with the same name are one family; it leaves ``/metrics`` when the last
    object naming it is deleted, or with its model."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        if not isinstance(name, str) or not isinstance(description, str) or kind not in tuple(MetricKind):
            raise TritonModelException("MetricFamily needs a name, a description and a kind")
        self._store = _metric_store()
        try:
            self._family = self._store.family(name, description, MetricKind(kind))
        except ValueError as exc:
            raise TritonModelException(f"Failed to create metric family: {exc}") from exc

    def Metric(
        self, labels: Mapping[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> Metric:
        """The metric of this family with ``labels`` (histograms need ``buckets``, others refuse them)."""
        labels = {} if labels is None else labels
        if not isinstance(labels, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise TritonModelException("Failed to create metric. Labels must map strings to strings.")
        histogram = self._family.kind == MetricKind.HISTOGRAM
        if buckets is not None and not histogram:
            raise TritonModelException("Failed to create metric. Unexpected buckets found.")
        if buckets is None and histogram:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        if buckets is not None and any(low >= high for low, high in itertools.pairwise(buckets)):
            # (Triton's Prometheus library refuses them so)
            raise TritonModelException("Failed to create metric. Bucket Boundaries must be strictly sorted")
        return Metric(self, self._store.series(self._family, labels, buckets))

    def __del__(self) -> None:
        family = getattr(self, "_family", None)
        if family is not None:
            self._store.release_family(family)


class Metric:
    """One metric of a family (a label set): ``increment``, ``set``, ``observe`` and ``value``.

    It does not keep its ``MetricFamily`` object alive: once that is deleted, the metric refuses
    every operation, as Triton's does (its family cleared it)."""

    def __init__(self, family: MetricFamily, series: Series) -> None:
        self._owner = weakref.ref(family)
        self._store = family._store
        self._family = family._family
        self._series = series

    def increment(self, value: float) -> None:
        self._apply(self._store.increment, value, "Failed to increment metric value")

    def set(self, value: float) -> None:
        self._apply(self._store.set, value, "Failed to set metric value")

    def observe(self, value: float) -> None:
        self._apply(self._store.observe, value, "Failed to observe metric value")

    def value(self) -> float:
        self._check()
        try:
            return self._store.value(self._family, self._series)
        except ValueError as exc:
            raise TritonModelException(f"Failed to get metric value: {exc}") from exc

    def _apply(self, operation: Any, value: float, failure: str) -> None:
        self._check()
        try:
            operation(self._family, self._series, float(value))
        except ValueError as exc:
            raise TritonModelException(f"{failure}: {exc}") from exc

    def _check(self) -> None:
        if self._owner() is None:
            raise TritonModelException(
                "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. The "
                "'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have "
                "been deleted."
            )

    def __del__(self) -> None:
        store = getattr(self, "_store", None)
        if store is not None:
            store.release_series(self._family, self._series)
