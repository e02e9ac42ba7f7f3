"""The shared memory registry on its own: what it refuses to open, and regions unregistered while a
request still holds them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from naiad.core.errors import InferenceServerError
from naiad.core.shm import SharedMemoryRegistry


@pytest.fixture
def key() -> Iterator[str]:
    name = f"naiad_registry_test_{os.getpid()}"
    path = Path("/dev/shm") / name
    path.write_bytes(bytes(range(64)))
    yield "/" + name
    path.unlink(missing_ok=True)


def test_an_unregistered_region_stays_usable_by_the_request_holding_it(key: str) -> None:
    registry = SharedMemoryRegistry(enabled=True)
    registry.register("r", key, 0, 64)
    retired: list[str] = []
    registry.retired = retired.append
    region = registry.acquire("r")
    registry.unregister("r")
    assert [status.name for status in registry.status()] == ["r"]  # awaiting its request, as in Triton
    assert registry.acquire("r") is region  # ...and still usable by new ones
    region.write(0, memoryview(b"\xff\xff"))
    registry.release(region)
    assert retired == [] and registry.get("r") is region
    registry.release(region)
    assert registry.status() == [] and retired == ["r"]  # gone with the last holder
    with pytest.raises(OSError):  # ...its descriptor closed
        region.read(0, 1)
    assert Path(f"/dev/shm{key}").read_bytes()[:3] == b"\xff\xff\x02"


def test_reads_and_writes_stay_inside_the_window(key: str) -> None:
    registry = SharedMemoryRegistry(enabled=True)
    registry.register("w", key, 16, 8)
    region = registry.get("w")
    assert bytes(region.read(0, 8)) == bytes(range(16, 24))
    for offset, size in [(8, 1), (0, 9), (-1, 1), (7, 2)]:
        with pytest.raises(InferenceServerError):
            region.read(offset, size)
        with pytest.raises(InferenceServerError):
            region.write(offset, memoryview(bytes(size)))
    registry.close()


def test_links_and_folders_are_not_opened(key: str, tmp_path: Path) -> None:
    registry = SharedMemoryRegistry(enabled=True)
    target = tmp_path / "secret"
    target.write_bytes(b"x" * 64)
    link = Path(f"/dev/shm/naiad_registry_link_{os.getpid()}")
    link.symlink_to(target)
    folder = Path(f"/dev/shm/naiad_registry_folder_{os.getpid()}")
    folder.mkdir()
    try:
        for bad in (f"/{link.name}", f"/{folder.name}"):
            with pytest.raises(InferenceServerError, match="Unable to open shared memory region"):
                registry.register("x", bad, 0, 8)
    finally:
        link.unlink()
        folder.rmdir()


def test_the_servers_own_python_worker_regions_are_reserved() -> None:
    registry = SharedMemoryRegistry(enabled=True)
    with pytest.raises(InferenceServerError, match="reserved prefix 'naiad-'"):
        registry.register("x", "/naiad-worker.shm", 0, 8)


def test_nothing_registers_or_unregisters_while_disabled(key: str) -> None:
    registry = SharedMemoryRegistry(enabled=False)
    for call in (lambda: registry.register("x", key, 0, 8), registry.unregister):
        with pytest.raises(InferenceServerError, match="--allow-client-shm=true") as caught:
            call()
        assert caught.value.code.value == "UNSUPPORTED"
    assert registry.status() == []
