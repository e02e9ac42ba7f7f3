"""``naiad.backends.python.shm``: tensors placed in a region read back equal, as read-only views and as
copies of their own, whichever way they were copied (small ones in the message as their bytes,
middling ones as bytes, large ones with ``copyto``, strided ones too); region files are named after their process, and the files of
processes that are gone are swept (a process killed between creating a region and its peer mapping
it is the one case that leaves a file behind)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from naiad.backends.python import shm
from naiad.core.request import Tensor


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_placed_tensors_read_back_equal_as_views_and_copies() -> None:
    grid = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensors = [
        Tensor("SMALL", "FP32", np.arange(4, dtype=np.float32)),
        Tensor("STRIDED", "FP32", grid.T),  # not C-contiguous: read back in its logical order
        Tensor("MIDDLING", "UINT8", np.arange(5000, dtype=np.uint8)),  # past the message, as bytes
        Tensor("WIDE", "INT16", np.arange(6000, dtype=np.int16).reshape(2, -1)[:, ::2]),
        Tensor("LARGE", "INT64", np.arange(20_000, dtype=np.int64)),  # 160 KB: past the bytes path
        Tensor("TEXT", "BYTES", np.array([b"a", b"bc"], dtype=np.object_)),
        Tensor("EMPTY", "FP32", np.zeros((0, 4), dtype=np.float32)),
    ]
    region = shm.Region.create(shm.layout_size(tensors))
    try:
        placements = shm.place(region, tensors)
        for placement, tensor in zip(placements, tensors, strict=True):
            assert placement[:3] == (tensor.name, tensor.datatype, tensor.data.shape)
            assert placement[4] == -1 or placement[4] % 64 == 0
            # a copy is the reader's own (as the engine reads outputs out of a region its writer reuses)
            copied = shm.copy(region, placement)
            assert copied.flags.writeable and np.array_equal(copied, tensor.data), tensor.name
            read = shm.view(region, placement)
            assert read.dtype == tensor.data.dtype and np.array_equal(read, tensor.data), tensor.name
            assert not read.flags.writeable, tensor.name  # a model must not write into a request
            assert placement[4] == -1 or not np.shares_memory(copied, read), tensor.name
            # as a model process reads its inputs: its own array, which it may change in place
            writable = shm.view(region, placement, writable=True)
            assert writable.flags.writeable and np.array_equal(writable, tensor.data), tensor.name
        # where each went: the small ones in the message as bytes (no room taken in the region)
        inline = {p[0] for p in placements if isinstance(p[5], bytes)}
        assert inline == {"SMALL", "STRIDED"}
        assert [p[0] for p in placements if p[5] is None] == ["MIDDLING", "WIDE", "LARGE"]
        assert shm.layout_size(tensors) == 5056 + 6016 + 160_000
    finally:
        region.unlink()


def test_an_execution_of_small_tensors_needs_no_region() -> None:
    tensors = [Tensor("A", "FP32", np.ones(4, np.float32)), Tensor("B", "INT64", np.arange(512))]
    assert shm.layout_size(tensors) == 0
    placements = shm.place(None, tensors)
    assert [shm.view(None, p).tolist() for p in placements] == [[1.0] * 4, list(range(512))]
    # a model changing its copy changes nothing that was sent
    changed = shm.view(None, placements[1], writable=True)
    changed[0] = 7
    assert shm.view(None, placements[1])[0] == 0


def test_regions_carry_the_creating_process_id() -> None:
    region = shm.Region.create(10)
    try:
        assert Path(region.path).name.startswith(f"naiad-{os.getpid()}-")
    finally:
        region.unlink()


def test_orphans_are_removed_and_nothing_else(tmp_path: Path) -> None:
    dead = tmp_path / f"naiad-{_dead_pid()}-abc.shm"
    alive = tmp_path / f"naiad-{os.getpid()}-def.shm"
    unnamed = tmp_path / "naiad-xyz.shm"  # from before files carried a process ID: cannot tell
    other = tmp_path / f"other-{_dead_pid()}-abc.shm"
    for path in (dead, alive, unnamed, other):
        path.write_bytes(b"x")
    assert shm.remove_orphans(str(tmp_path)) == [str(dead)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (alive, unnamed, other))


def test_the_files_of_a_process_that_ended_but_is_not_reaped_yet_are_orphans(tmp_path: Path) -> None:
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        orphan = tmp_path / f"naiad-{zombie.pid}-abc.shm"
        orphan.write_bytes(b"x")
        assert shm.remove_orphans(str(tmp_path)) == [str(orphan)]
    finally:
        zombie.wait()


def test_the_files_of_a_process_seen_to_end_are_orphans_whoever_has_its_id_now(tmp_path: Path) -> None:
    """The template saw the engine and its model processes end; by the time it sweeps, their IDs may be
    other processes' (here: this one's, as if reused)."""
    reused = tmp_path / f"naiad-{os.getpid()}-abc.shm"
    reused.write_bytes(b"x")
    assert shm.remove_orphans(str(tmp_path)) == []  # a running process's, as far as anyone can tell
    assert shm.remove_orphans(str(tmp_path), ended={os.getpid()}) == [str(reused)]


def test_tensors_that_all_fit_in_the_message_are_placed_in_one_pass_as_place_would() -> None:
    small = [
        Tensor("A", "FP32", np.ones((2, 2), np.float32)),
        Tensor("T", "BYTES", np.array([b"x"], dtype=np.object_)),
        Tensor("E", "FP32", np.zeros((0, 3), np.float32)),
        Tensor("B", "UINT8", np.arange(4096, dtype=np.uint8) % 251),  # the largest that fits
    ]
    placements = shm.in_message(small)
    assert placements is not None
    expected = shm.place(None, small)
    for fast, general, tensor in zip(placements, expected, small, strict=True):
        assert fast[:5] == general[:5]
        assert np.array_equal(shm.view(None, fast), tensor.data)
        assert np.array_equal(shm.view(None, general), tensor.data)
    # one past the message: the general way, with a region
    assert shm.in_message([*small, Tensor("C", "UINT8", np.zeros(4097, np.uint8))]) is None
