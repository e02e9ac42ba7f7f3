"""An arena's allocator: blocks in ring order, and a second ring for blocks that live long."""

from __future__ import annotations

from naiad.ipc import arena
from naiad.ipc.arena import Arena

RING = 4096
LASTING = 2048


def _arena(lasting: int) -> Arena:
    return Arena(arena.create("test-arena", RING + lasting), RING + lasting, writable=True, lasting=lasting)


def _cycle(memory: Arena, count: int) -> list[int | None]:
    """``count`` short-lived blocks, each freed once the next one is allocated (answers released
    while later ones are written): their offsets, ``None`` for one that found no room."""
    offsets: list[int | None] = []
    previous = None
    for _ in range(count):
        offset = memory.allocate(1000)
        offsets.append(offset)
        if previous is not None:
            memory.free(previous)
        previous = offset
    return offsets


def test_a_long_lived_block_in_the_ring_holds_back_every_later_block() -> None:
    """Why the second ring exists: one block kept while the others come and go stops the ring from
    wrapping past it, and allocation fails with almost all of the ring free."""
    memory = _arena(0)
    assert memory.reserve(512) is None  # no second ring: nothing reserved
    kept = memory.allocate(512)
    assert kept == 0
    assert None in _cycle(memory, 10)
    assert memory.in_use <= 2


def test_a_reserved_block_lives_apart_and_the_ring_goes_on_around() -> None:
    memory = _arena(LASTING)
    kept = [memory.reserve(512), memory.reserve(512)]
    assert all(offset is not None and RING <= offset < RING + LASTING for offset in kept)
    offsets = _cycle(memory, 50)  # twelve times round the ring while the reserved blocks live
    assert None not in offsets and all(offset is not None and offset < RING for offset in offsets)
    assert memory.in_use == 3  # the two reserved blocks and the last short one
    assert memory.reserve(LASTING) is None  # the second ring is full enough: no room there
    for offset in kept:
        assert offset is not None
        memory.free(offset)
    again = memory.reserve(LASTING - 64)  # freed, by offset, in the ring they came from
    assert again == RING
    memory.free(again)
    memory.free(offsets[-1])  # type: ignore[arg-type]
    assert memory.in_use == 0
