"""DLPack for bfloat16, which numpy cannot exchange.

Triton's ``pb_utils.Tensor.to_dlpack``/``from_dlpack`` move BF16 tensors to and from PyTorch (the usual
way a Python model hands a bfloat16 tensor to torch).  numpy, which holds our tensors, refuses every
dtype DLPack calls ``kDLBfloat`` (``BufferError: DLPack only supports signed/unsigned integers, float
and complex dtypes``), and ml_dtypes' ``bfloat16`` is such a dtype.  So this module writes and reads the
DLPack structures itself, for that one dtype, over the array's memory (no copy):

* :func:`export` makes a legacy ``"dltensor"`` capsule whose ``DLManagedTensor`` keeps the array alive
  until the consumer calls its deleter.  The capsule has no destructor of its own: one written in
  Python would run while a refusing consumer's exception is pending (numpy's, say), which CPython
  cannot survive cleanly; so a capsule dropped unconsumed keeps its array until the process ends;
* :func:`import_bfloat16` reads a CPU ``kDLBfloat`` 16-bit capsule into an ml_dtypes ``bfloat16`` array
  that owns the producer's tensor and calls its deleter when the array is gone; any other capsule is
  left to numpy (``None``).

The layouts are DLPack's ABI (``dlpack.h``, version 0.x/1.x legacy capsule).
"""

from __future__ import annotations

import ctypes
from typing import Any

import ml_dtypes
import numpy as np

#: ``DLDeviceType.kDLCPU`` and ``DLDataTypeCode.kDLBfloat``.
_CPU = 1
_BFLOAT = 4
_NAME = b"dltensor"
_USED = b"used_dltensor"


class _Device(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


class _DataType(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16))


class _Tensor(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    )


class _Managed(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = (("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter))

#: The C API, with argument types of its own (``ctypes.pythonapi``'s are shared with other code).
_api = ctypes.PyDLL(None)
_new_capsule = _api.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
_pointer = _api.PyCapsule_GetPointer
_pointer.restype = ctypes.c_void_p
_pointer.argtypes = (ctypes.c_void_p, ctypes.c_char_p)
_rename = _api.PyCapsule_SetName
_rename.restype = ctypes.c_int
_rename.argtypes = (ctypes.py_object, ctypes.c_char_p)

#: Exported tensors not yet released, by the address of their ``DLManagedTensor``: what keeps the
#: structures and the array alive while a consumer holds them.
_exported: dict[int, tuple[Any, ...]] = {}


@_Deleter  # type: ignore[untyped-decorator]  # a ctypes callback type
def _release(managed: Any) -> None:
    _exported.pop(ctypes.addressof(managed.contents), None)


def is_bfloat16(array: np.ndarray[Any, Any]) -> bool:
    return bool(array.dtype == ml_dtypes.bfloat16)


def export(array: np.ndarray[Any, Any]) -> Any:
    """A ``"dltensor"`` capsule over a bfloat16 ``array``'s memory (kept alive until released)."""
    ndim = array.ndim
    shape = (ctypes.c_int64 * max(ndim, 1))(*array.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*(stride // array.itemsize for stride in array.strides))
    managed = _Managed()
    tensor = managed.dl_tensor
    tensor.data = array.ctypes.data
    tensor.device = _Device(_CPU, 0)
    tensor.ndim = ndim
    tensor.dtype = _DataType(_BFLOAT, 16, 1)
    tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    managed.deleter = _release
    address = ctypes.addressof(managed)
    _exported[address] = (managed, shape, strides, array)
    return _new_capsule(address, _NAME, None)


def import_bfloat16(capsule: Any) -> np.ndarray[Any, Any] | None:
    """A bfloat16 array over a CPU ``kDLBfloat`` capsule (which it consumes); ``None`` for any other
    capsule, untouched, for numpy to read."""
    try:
        address = _pointer(ctypes.c_void_p(id(capsule)), _NAME)
    except ValueError:  # not a "dltensor" capsule (a versioned or a used one): numpy's to judge
        return None
    managed = _Managed.from_address(address)
    tensor = managed.dl_tensor
    dtype = tensor.dtype
    if (dtype.code, dtype.bits, dtype.lanes) != (_BFLOAT, 16, 1) or tensor.device.device_type != _CPU:
        return None
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    count = int(np.prod(shape, dtype=np.int64))
    if tensor.strides and count:
        strides = tuple(tensor.strides[i] * 2 for i in range(tensor.ndim))
        span = 2 + sum((d - 1) * s for d, s in zip(shape, strides, strict=True) if d > 0)
    else:
        strides = None
        span = 2 * count
    _rename(capsule, _USED)
    # the bytes, read in place; the array's base holds them, and they hold the producer's release
    data = (ctypes.c_uint8 * span).from_address(tensor.data + tensor.byte_offset) if count else bytearray()
    release = _Release(managed)
    if count:
        data._release = release  # type: ignore[union-attr]
    flat = np.frombuffer(data, dtype=np.uint16, count=span // 2)
    if strides is None:
        array = flat.reshape(shape)
    else:
        array = np.lib.stride_tricks.as_strided(flat, shape=shape, strides=strides)
    viewed: np.ndarray[Any, Any] = array.view(ml_dtypes.bfloat16)
    return viewed


class _Release:
    """Calls a consumed ``DLManagedTensor``'s deleter when garbage-collected."""

    __slots__ = ("_managed",)

    def __init__(self, managed: Any) -> None:
        self._managed = managed

    def __del__(self) -> None:
        deleter = self._managed.deleter
        if deleter:
            deleter(ctypes.pointer(self._managed))
