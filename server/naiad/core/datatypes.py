"""Tensor datatypes: protocol names ("FP32"), config enums ("TYPE_FP32") and numpy dtypes.

The core is numpy-native, so every protocol datatype has exactly one numpy representation.  BYTES is a
numpy ``object_`` array of ``bytes`` (never ``np.bytes_``, which drops trailing NULs).  BF16 uses
``ml_dtypes.bfloat16``, the type tritonclient itself uses for it (only binary transports carry it, as in
Triton).
"""

from __future__ import annotations

from typing import Any, cast

import ml_dtypes
import numpy as np

from naiad.core.errors import InvalidArgumentError

#: Protocol datatype -> numpy dtype.
NUMPY_DTYPE: dict[str, np.dtype[np.generic]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
    "BF16": np.dtype(ml_dtypes.bfloat16),
}

#: Little-endian wire dtypes (the binary protocols are little-endian whatever the host).
WIRE_DTYPE: dict[str, np.dtype[np.generic]] = {
    k: v.newbyteorder("<") for k, v in NUMPY_DTYPE.items() if k != "BYTES"
}

#: Size in bytes of one element, for fixed-size datatypes.
ELEMENT_SIZE: dict[str, int] = {k: v.itemsize for k, v in NUMPY_DTYPE.items() if k != "BYTES"}

#: Protocol datatype -> ``ModelConfig`` DataType enum name.
CONFIG_TYPE: dict[str, str] = {k: f"TYPE_{k}" for k in NUMPY_DTYPE if k != "BYTES"}
CONFIG_TYPE["BYTES"] = "TYPE_STRING"

#: ``ModelConfig`` DataType enum name -> protocol datatype.
PROTOCOL_TYPE: dict[str, str] = {v: k for k, v in CONFIG_TYPE.items()}

_FROM_NUMPY: dict[np.dtype[np.generic], str] = {v: k for k, v in NUMPY_DTYPE.items()}


def is_valid(datatype: str) -> bool:
    return datatype in NUMPY_DTYPE


def from_numpy(dtype: np.dtype[np.generic]) -> str:
    """The protocol datatype for a numpy dtype; bytes/str arrays are BYTES."""
    dtype = np.dtype(dtype)
    if dtype.kind in ("S", "U", "O"):
        return "BYTES"
    found = _FROM_NUMPY.get(dtype.newbyteorder("="))
    if found is None:
        raise ValueError(f"numpy dtype {dtype} has no Triton datatype")
    return found


def integer_range(dtype: np.dtype[Any]) -> np.iinfo[Any]:
    """``np.iinfo`` for an integer dtype of the tables above (which type their dtypes as generic)."""
    return np.iinfo(cast("np.dtype[np.integer[Any]]", dtype))


def config_to_protocol(config_type: str) -> str:
    """``TYPE_FP32`` -> ``FP32``; ``TYPE_STRING`` -> ``BYTES``."""
    return PROTOCOL_TYPE[config_type]


#: The largest byte size numpy allows an array's shape to describe (``NPY_MAX_INTP``).
MAX_ARRAY_BYTES = 2**63 - 1


def empty_but_too_large(shape: tuple[int, ...], datatype: str) -> bool:
    """Whether ``shape`` has no elements (a 0 in it) yet dimensions numpy cannot give an array:
    numpy multiplies the others, and the element size, before it sees the 0 (``[0, 2**31,
    2**31]``).  Such a request must be refused as the client's fault rather than fail making it."""
    if 0 not in shape:
        return False
    product = NUMPY_DTYPE[datatype].itemsize if datatype in NUMPY_DTYPE else 8
    for dim in shape:
        if dim:
            product *= dim
            if product > MAX_ARRAY_BYTES:
                return True
    return False


def check_holdable(name: str, shape: tuple[int, ...], datatype: str) -> None:
    """Refuse, as the client's fault, an input whose shape :func:`empty_but_too_large` describes."""
    if empty_but_too_large(shape, datatype):
        text = "[" + ",".join(str(dim) for dim in shape) + "]"
        raise InvalidArgumentError(
            f"invalid shape for input '{name}': shape {text} has no elements, but its other dimensions "
            f"exceed the maximum size of {MAX_ARRAY_BYTES} bytes"
        )
