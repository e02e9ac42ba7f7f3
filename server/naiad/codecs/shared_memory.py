"""Tensors in client shared memory: the ``shared_memory_*`` tensor parameters, inputs read out of a
region, and outputs written into one.

Both protocols carry the same three parameters (``shared_memory_region``, ``shared_memory_byte_size``,
``shared_memory_offset``), so they are checked here once, with Triton's messages.  Bytes in a region
have the wire layout of :mod:`naiad.codecs.wire`; an input is copied out of the region while the
request is decoded, so nothing downstream ever holds on to client memory.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from naiad.codecs import bytes_tensor
from naiad.codecs.wire import wire_data
from naiad.core import datatypes
from naiad.core.errors import InternalError, InvalidArgumentError, NotFoundError, request_prefix
from naiad.core.request import InferRequest, Parameters, Tensor
from naiad.core.shm import Region, SharedMemoryRegistry

REGION = "shared_memory_region"
BYTE_SIZE = "shared_memory_byte_size"
OFFSET = "shared_memory_offset"
_KEYS = (REGION, BYTE_SIZE, OFFSET)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one tensor lives: ``byte_size`` bytes at ``offset`` in region ``region``."""

    region: str
    byte_size: int
    offset: int


def placement(tensor: str, parameters: Parameters) -> Placement | None:
    """The tensor's placement from its parameters, ``None`` when it names no region."""
    region = parameters.get(REGION)
    if region is None:
        for key in (BYTE_SIZE, OFFSET):
            if key in parameters:
                raise InvalidArgumentError(
                    f"'{key}' can not be specified without '{REGION}' parameter for tensor '{tensor}'"
                )
        return None
    if not isinstance(region, str):
        raise InvalidArgumentError(
            f"invalid value type for '{REGION}' parameter for tensor '{tensor}', expected string_param."
        )
    if BYTE_SIZE not in parameters:
        raise InvalidArgumentError(
            f"'{BYTE_SIZE}' must be specified along with '{REGION}' parameter for tensor '{tensor}'"
        )
    return Placement(region, _integer(tensor, parameters, BYTE_SIZE), _integer(tensor, parameters, OFFSET))


def _integer(tensor: str, parameters: Parameters, key: str) -> int:
    value = parameters.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(
            f"invalid value type for '{key}' parameter for tensor '{tensor}', expected int64_param."
        )
    return value


def without_placement(parameters: Parameters) -> Parameters:
    """The parameters a model sees: the placement is the transport's business, not the model's."""
    return {key: value for key, value in parameters.items() if key not in _KEYS}


def read_input(
    registry: SharedMemoryRegistry,
    where: Placement,
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    request: InferRequest,
) -> np.ndarray[Any, Any]:
    """An input's array, copied out of its region.

    The declared byte size must be the tensor's exact size (Triton's rule); it is checked against
    the region before anything is read, and against the shape before the copy is interpreted.
    """
    region = registry.get(where.region)
    region.check(where.offset, where.byte_size)
    count = math.prod(shape)
    if datatype != "BYTES":
        expected = count * datatypes.ELEMENT_SIZE[datatype]
        if expected != where.byte_size:
            raise InvalidArgumentError(
                f"{request_prefix(request.id)}input byte size mismatch for input "
                f"'{name}' for model '{request.model_name}'. Expected {expected}, got {where.byte_size}"
            )
    data = region.read(where.offset, where.byte_size)
    if request.regions is None:
        request.regions = [where.region]
    else:
        request.regions.append(where.region)
    if datatype == "BYTES":
        prefix = request_prefix(request.id)
        return bytes_tensor.deserialize(data, count, name, request.model_name, prefix).reshape(shape)
    return np.frombuffer(data, dtype=datatypes.WIRE_DTYPE[datatype], count=count).reshape(shape)


def check_output(registry: SharedMemoryRegistry, where: Placement) -> None:
    """Refuse a requested output whose region or window is wrong before the model runs."""
    registry.get(where.region).check(where.offset, where.byte_size)


@dataclass(frozen=True, slots=True)
class OutputTarget:
    """A requested output's placement and its region, held open until the request is answered."""

    placement: Placement
    region: Region


@dataclass(frozen=True, slots=True)
class Held:
    """The regions a request holds while it runs: its outputs' targets by name, and the regions its
    inputs were read from (an input's bytes were copied out; the region is held only so that an
    unregistration waits for the request, as in Triton)."""

    targets: dict[str, OutputTarget]
    inputs: list[Region]


def hold(registry: SharedMemoryRegistry, request: InferRequest) -> Held:
    """Hold the regions of ``request`` (see :meth:`SharedMemoryRegistry.acquire`): those of its
    outputs going to shared memory, and those its inputs were read from that are still registered
    (a frontend worker read them; one unregistered since lost nothing); give them back with
    :func:`release`."""
    held = Held({}, [])
    try:
        for output in request.outputs or ():
            where = placement(output.name, output.parameters)
            if where is not None:
                held.targets[output.name] = OutputTarget(where, registry.acquire(where.region))
        for name in request.regions or ():
            try:
                held.inputs.append(registry.acquire(name))
            except NotFoundError:
                pass
    except BaseException:
        release(registry, held)
        raise
    return held


def release(registry: SharedMemoryRegistry, held: Held) -> None:
    for target in held.targets.values():
        registry.release(target.region)
    for region in held.inputs:
        registry.release(region)


def shm_outputs(request: InferRequest) -> Collection[str]:
    """Names of the outputs written to shared memory: responses carry their metadata only."""
    return [output.name for output in request.outputs or () if REGION in output.parameters]


def write_outputs(targets: dict[str, OutputTarget], outputs: list[Tensor]) -> None:
    """Write each output that has a target into its region (Triton's error when it does not fit)."""
    for tensor in outputs:
        target = targets.get(tensor.name)
        if target is None:
            continue
        data = wire_data(tensor)
        view = memoryview(data) if isinstance(data, bytes) else data.reshape(-1).view(np.uint8).data
        where = target.placement
        if view.nbytes > where.byte_size:
            raise InternalError(
                f"shared memory size specified with the request for output '{tensor.name}' "
                f"({where.byte_size} bytes) should be at least {view.nbytes} bytes to hold the results"
            )
        target.region.write(where.offset, view)
