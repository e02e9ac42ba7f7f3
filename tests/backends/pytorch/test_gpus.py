"""GPU discovery: what KIND_GPU and KIND_AUTO instance groups resolve against."""

from __future__ import annotations

from pathlib import Path

import pytest
from naiad.backends import gpus

LISTING = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1111aaaa-0000-0000-0000-000000000000)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2222bbbb-0000-0000-0000-000000000000)
  MIG 3g.40gb     Device  0: (UUID: MIG-3333cccc-0000-0000-0000-000000000000)
"""


@pytest.mark.parametrize(
    ("visible", "count"),
    [
        (None, 2),
        ("1", 1),
        ("0,1", 2),
        ("0,7,1", 1),  # CUDA stops at the first entry that names no device
        ("-1", 0),
        ("", 0),
        ("GPU-2222bbbb-0000-0000-0000-000000000000", 1),
        ("MIG-3333cccc-0000-0000-0000-000000000000,0", 2),
    ],
)
def test_cuda_visible_devices_is_applied_as_cuda_applies_it(visible: str | None, count: int) -> None:
    assert gpus.visible_count(LISTING, visible) == count


def test_a_host_without_an_nvidia_driver_has_no_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(gpus, "_DRIVER_DIR", tmp_path / "absent")
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi either
    assert gpus.gpu_count() == 0
