"""A tensor's bytes as every binary transport carries them: little-endian, row-major, no padding,
BYTES elements length-prefixed.  HTTP binary data, gRPC raw contents and shared memory all use this."""

from __future__ import annotations

from typing import Any

import numpy as np

from naiad.codecs import bytes_tensor
from naiad.core import datatypes
from naiad.core.request import Tensor


def wire_data(tensor: Tensor) -> bytes | np.ndarray[Any, Any]:
    """The tensor's wire bytes; fixed-size types come back as a contiguous array (a buffer, no copy
    when the data is already little-endian and contiguous), BYTES as serialized ``bytes``."""
    if tensor.datatype == "BYTES":
        return bytes_tensor.serialize(tensor.data)
    data = tensor.data
    wire = datatypes.WIRE_DTYPE[tensor.datatype]
    if data.dtype != wire:
        data = data.astype(wire)
    if not data.flags.c_contiguous:
        data = np.ascontiguousarray(data)
    return data


def wire_size(data: bytes | np.ndarray[Any, Any]) -> int:
    return data.nbytes if isinstance(data, np.ndarray) else len(data)
