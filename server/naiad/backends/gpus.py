"""How many CUDA GPUs instances may be placed on: what ``KIND_GPU``/``KIND_AUTO`` groups resolve against.

Triton counts the devices CUDA shows it, so ``CUDA_VISIBLE_DEVICES`` (and MIG slices) decide what a
pod may use.  torch's count is that same CUDA view, so it is asked first when a CUDA build of torch is
installed; otherwise ``nvidia-smi -L`` lists the physical devices and ``CUDA_VISIBLE_DEVICES`` is
applied to that list the way the CUDA runtime applies it.  On a host with no NVIDIA driver the answer
is 0 at once: neither torch (hundreds of MiB and a second or two to import) nor a subprocess is paid
for on the CPU machines most tests and benchmarks run on.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger("naiad.backends.gpus")

#: Where the NVIDIA kernel driver lists its devices; absent on hosts (and containers) without GPUs.
_DRIVER_DIR = Path("/proc/driver/nvidia/gpus")


def gpu_count() -> int:
    """The number of CUDA devices this process may use (0 when there are none, or no way to tell)."""
    if not _DRIVER_DIR.is_dir() and shutil.which("nvidia-smi") is None:
        return 0
    counted = _count_with_torch()
    if counted is None:
        counted = _count_with_nvidia_smi()
    log.info("%d CUDA device(s) available for KIND_GPU instances", counted)
    return counted


def visible_count(listing: str, cuda_visible_devices: str | None) -> int:
    """How many of the devices in ``nvidia-smi -L`` output ``listing`` CUDA would expose.

    ``cuda_visible_devices`` is the variable's value (``None`` when unset).  As in the CUDA runtime,
    entries are indices or ``GPU-``/``MIG-`` UUIDs, and enumeration stops at the first entry that names
    no device, so ``"0,7,1"`` on a two-GPU host exposes one device and ``"-1"`` or ``""`` none.
    """
    devices = [line for line in listing.splitlines() if line.startswith("GPU ")]
    if cuda_visible_devices is None:
        return len(devices)
    visible = 0
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        known = entry.isdigit() and int(entry) < len(devices)
        if not known and not (entry.startswith(("GPU-", "MIG-")) and entry in listing):
            break
        visible += 1
    return visible


def _count_with_torch() -> int | None:
    """torch's device count, or ``None`` when torch is absent or built without CUDA (it sees none)."""
    try:
        import torch
    except ImportError:
        return None
    if torch.version.cuda is None:
        return None
    return int(torch.cuda.device_count())


def _count_with_nvidia_smi() -> int:
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return 0
    try:
        listing = subprocess.run(
            [executable, "-L"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("nvidia-smi -L failed (%s): no GPU will be used", exc)
        return 0
    return visible_count(listing, os.environ.get("CUDA_VISIBLE_DEVICES"))
