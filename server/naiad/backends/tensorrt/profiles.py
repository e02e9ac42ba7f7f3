"""Choosing the optimization profile a batch of requests runs under.

An engine with dynamic shapes is built with one or more optimization profiles, each accepting a range
of input shapes and tuned for one shape in it (``opt``).  An instance may use the profiles its instance
group lists (``instance_group { profile: [...] }``; profile 0 when it lists none, as in Triton).  For
each call the profile is, among those whose ranges hold every input shape, the one whose ``opt``
shapes are closest to the actual shapes, so a batch of 2 runs the kernels tuned for small batches
rather than those for 64.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from naiad.backends.tensorrt.tensors import EngineTensor, Shape
from naiad.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc


def group_profiles(config: mc.ModelConfig, instance_name: str, profile_count: int) -> list[int]:
    """The profile indices the instance called ``instance_name`` may use.

    Instances are named ``<group name>_<n>``, which identifies their group.
    """
    group_name = instance_name.rsplit("_", 1)[0]
    listed: list[str] = []
    for group in config.instance_group:
        if group.name == group_name:
            listed = list(group.profile)
    chosen: list[int] = []
    for text in listed or ["0"]:
        if not text.isdigit() or int(text) >= profile_count:
            raise InvalidArgumentError(
                f"unable to load model '{config.name}': instance group '{group_name}' specifies "
                f"optimization profile '{text}', but the engine has {profile_count} profile(s) "
                f"(0 to {profile_count - 1})"
            )
        chosen.append(int(text))
    return chosen


def choose_profile(
    inputs: Sequence[EngineTensor], allowed: Sequence[int], shapes: Mapping[str, Shape]
) -> int | None:
    """The allowed profile that accepts ``shapes`` (input name -> shape) and fits them best, if any."""
    best: tuple[int, int] | None = None
    for profile in allowed:
        distance = 0
        for tensor in inputs:
            shape = shapes.get(tensor.name)
            if shape is None:
                continue
            bounds = tensor.profiles[profile]
            if not _within(shape, bounds.min, bounds.max):
                break
            distance += sum(abs(size - opt) for size, opt in zip(shape, bounds.opt, strict=True))
        else:
            if best is None or distance < best[0]:
                best = (distance, profile)
    return None if best is None else best[1]


def max_batch(inputs: Sequence[EngineTensor], allowed: Sequence[int]) -> int:
    """The largest dim 0 every input accepts under some allowed profile (what ``max_batch_size`` may be)."""
    largest = 0
    for profile in allowed:
        limits = [tensor.profiles[profile].max[0] for tensor in inputs if tensor.profiles and tensor.shape]
        if limits:
            largest = max(largest, min(limits))
    return largest


def _within(shape: Shape, low: Shape, high: Shape) -> bool:
    if len(shape) != len(low):
        return False
    return all(lo <= size <= hi for size, lo, hi in zip(shape, low, high, strict=True))
