"""What a TensorRT engine says about its I/O tensors, in the server's terms and free of TensorRT.

The engine module reads these facts once from the deserialized engine; auto-complete, config checks
and profile choice then work on plain data, which is what lets them be tested where TensorRT cannot
be installed.
"""

from __future__ import annotations

from dataclasses import dataclass

from naiad.core import datatypes

#: TensorRT ``DataType`` member name -> protocol datatype.  FP8, INT4 and FP4 have no protocol type.
PROTOCOL_TYPE: dict[str, str] = {
    "FLOAT": "FP32",
    "HALF": "FP16",
    "BF16": "BF16",
    "INT8": "INT8",
    "INT32": "INT32",
    "INT64": "INT64",
    "BOOL": "BOOL",
    "UINT8": "UINT8",
}

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ProfileShapes:
    """The shapes one profile accepts for one input: ``min`` to ``max``, with kernels tuned for ``opt``."""

    min: Shape
    opt: Shape
    max: Shape


@dataclass(frozen=True, slots=True)
class EngineTensor:
    """One I/O tensor of the engine; ``shape`` has -1 for dynamic dimensions.

    ``profiles`` holds, for an input, its shapes under each optimization profile, in profile order
    (empty for outputs).
    """

    name: str
    is_input: bool
    trt_type: str
    shape: Shape
    profiles: tuple[ProfileShapes, ...] = ()
    is_shape_tensor: bool = False

    @property
    def datatype(self) -> str | None:
        """The protocol datatype, or ``None`` when the server cannot carry this type."""
        return PROTOCOL_TYPE.get(self.trt_type)

    @property
    def config_type(self) -> str:
        """The ``TYPE_*`` name of the tensor's type (TensorRT's own name when there is none)."""
        datatype = self.datatype
        return datatypes.CONFIG_TYPE[datatype] if datatype is not None else self.trt_type

    def can_batch(self) -> bool:
        """Whether dim 0 is dynamic, which is how an explicit-batch engine batches."""
        return len(self.shape) > 0 and self.shape[0] == -1
