"""What ONNX Runtime says about a model's tensors, and the conversions its Python API needs.

ORT describes tensors as ``tensor(float)`` strings with shapes whose unknown dimensions are ``None`` or
symbolic names; Triton treats every such dimension as ``-1``.  Strings are the one datatype that
needs converting: ORT's Python API reads an object array of ``bytes`` as their ``repr`` (``"b'1'"``)
and hands strings back as ``str``, while the server carries BYTES as ``bytes``; so BYTES are decoded as
UTF-8 on the way in and encoded on the way out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from naiad.core import datatypes
from naiad.core.errors import InvalidArgumentError

Array = np.ndarray[Any, Any]

#: ORT element type -> protocol datatype.  BF16 is absent: numpy, hence ORT's Python API, has no
#: bfloat16, so such tensors cannot be fed or read here.
PROTOCOL_TYPE: dict[str, str] = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}


@dataclass(frozen=True, slots=True)
class ModelTensor:
    """One input or output as the model file declares it; ``shape`` uses -1 for unknown sizes."""

    name: str
    ort_type: str
    shape: tuple[int, ...]

    @property
    def datatype(self) -> str | None:
        """The protocol datatype, or ``None`` when the server cannot carry this type."""
        return PROTOCOL_TYPE.get(self.ort_type)

    @property
    def config_type(self) -> str:
        """The ``TYPE_*`` name Triton prints for this tensor (the ORT name when there is none)."""
        datatype = self.datatype
        return datatypes.CONFIG_TYPE[datatype] if datatype is not None else self.ort_type

    def can_batch(self) -> bool:
        """Whether dim 0 is variable, which is how Triton decides a model can batch."""
        return len(self.shape) > 0 and self.shape[0] == -1


def model_tensors(node_args: Iterable[Any]) -> dict[str, ModelTensor]:
    """``session.get_inputs()`` (or outputs) as :class:`ModelTensor` by name, in model order."""
    tensors: dict[str, ModelTensor] = {}
    for arg in node_args:
        shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in (arg.shape or ()))
        tensors[arg.name] = ModelTensor(arg.name, arg.type, shape)
    return tensors


def to_model(name: str, datatype: str, array: Array) -> Array:
    """A request tensor as ORT accepts it: BYTES become ``str`` objects, others the exact dtype.

    Raises :class:`InvalidArgumentError` for BYTES that are not UTF-8, which ORT's Python API cannot
    carry.
    """
    if datatype != "BYTES":
        dtype = datatypes.NUMPY_DTYPE[datatype]
        return array if array.dtype == dtype else array.astype(dtype)
    try:
        text = [_text(item) for item in array.reshape(-1)]
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(
            f"input '{name}' holds bytes that are not valid UTF-8, which ONNX Runtime string tensors "
            f"cannot carry here: {exc}"
        ) from exc
    converted = np.empty(len(text), dtype=np.object_)
    converted[:] = text
    return converted.reshape(array.shape)


def from_model(datatype: str, array: Array) -> Array:
    """An ORT output as the server carries it: BYTES as ``bytes`` objects, others unchanged."""
    if datatype != "BYTES":
        return array
    converted = np.empty(array.size, dtype=np.object_)
    converted[:] = [_bytes(item) for item in array.reshape(-1)]
    return converted.reshape(array.shape)


def _text(item: Any) -> str:
    return item.decode("utf-8") if isinstance(item, bytes | bytearray) else str(item)


def _bytes(item: Any) -> bytes:
    return item.encode("utf-8") if isinstance(item, str) else bytes(item)
