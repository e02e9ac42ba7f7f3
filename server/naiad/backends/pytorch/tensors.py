"""Datatypes torch models take, and moving tensors between the server's numpy arrays and torch.

The datatypes are those of Triton's PyTorch backend (no unsigned types beyond UINT8: torch has no
kernels for most of them), plus BF16, which torch has natively and the server carries as
``ml_dtypes.bfloat16``.  BYTES travel as ``List[str]``, the one string form TorchScript has, exactly as
Triton passes them.

numpy has no bfloat16 that torch recognises, so BF16 crosses as its 16 raw bits (an ``int16`` view) in
both directions; no value is converted.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import torch

from naiad.core.errors import InvalidArgumentError

Array = np.ndarray[Any, Any]

#: Protocol datatype -> torch dtype, for every non-string datatype a torch model may take or produce.
TORCH_DTYPE: dict[str, torch.dtype] = {
    "BOOL": torch.bool,
    "UINT8": torch.uint8,
    "INT8": torch.int8,
    "INT16": torch.int16,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "FP16": torch.float16,
    "FP32": torch.float32,
    "FP64": torch.float64,
    "BF16": torch.bfloat16,
}

#: torch dtype -> protocol datatype.
PROTOCOL_TYPE: dict[torch.dtype, str] = {dtype: name for name, dtype in TORCH_DTYPE.items()}

_BF16 = np.dtype(ml_dtypes.bfloat16)


def supported(datatype: str) -> bool:
    """Whether a config tensor of this protocol datatype can be fed to or read from a torch model."""
    return datatype in TORCH_DTYPE or datatype == "BYTES"


def to_torch(array: Array, device: torch.device) -> torch.Tensor:
    """``array`` as a tensor on ``device``.

    Request tensors are often read-only views of the received body, which torch refuses to wrap
    (and warns about), so those are copied once; on a GPU the transfer copies anyway.
    """
    if not array.flags.writeable:
        array = array.copy()
    if array.dtype == _BF16:
        tensor = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    else:
        tensor = torch.from_numpy(array)
    return tensor if device.type == "cpu" else tensor.to(device, non_blocking=True)


def from_torch(tensor: torch.Tensor) -> Array:
    """A model output as a host numpy array of the matching protocol dtype."""
    host = tensor.detach().cpu().contiguous()
    if host.dtype == torch.bfloat16:
        return host.view(torch.int16).numpy().view(_BF16)
    return host.numpy()


def to_strings(name: str, array: Array) -> Array:
    """A BYTES input decoded to ``str`` objects (same shape), ready to become a ``List[str]``.

    Decoding per request, before requests are joined, lets a request that is not UTF-8 fail alone.
    """
    decoded = np.empty(array.size, dtype=np.object_)
    try:
        decoded[:] = [_text(item) for item in array.reshape(-1)]
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(
            f"input '{name}' holds bytes that are not valid UTF-8, which a List[str] cannot carry: {exc}"
        ) from exc
    return decoded.reshape(array.shape)


def from_strings(values: list[str]) -> Array:
    """A ``List[str]`` output as the 1-D BYTES array the server carries."""
    array = np.empty(len(values), dtype=np.object_)
    array[:] = [value.encode("utf-8") for value in values]
    return array


def _text(item: Any) -> str:
    return item.decode("utf-8") if isinstance(item, bytes) else str(item)
