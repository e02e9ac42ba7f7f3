"""Memory growth shared out between loads that ran at the same time (repository/footprint.py)."""

from __future__ import annotations

import threading

from naiad.repository.footprint import OverlappingLoads


def test_a_load_alone_is_charged_all_of_its_growth() -> None:
    loads = OverlappingLoads()
    assert loads.end(loads.begin()) == 1
    assert loads.end(loads.begin()) == 1


def test_each_load_counts_every_load_that_overlapped_it() -> None:
    loads = OverlappingLoads()
    first = loads.begin()
    second = loads.begin()  # overlaps first
    assert loads.end(first) == 2
    third = loads.begin()  # overlaps second only
    assert loads.end(second) == 3
    assert loads.end(third) == 2


def test_loads_on_many_threads_each_see_all_of_them() -> None:
    loads = OverlappingLoads()
    started, release = threading.Barrier(8), threading.Event()
    counts: list[int] = []

    def load() -> None:
        token = loads.begin()
        started.wait()
        release.wait()
        counts.append(loads.end(token))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    release.set()
    for thread in threads:
        thread.join()
    assert counts == [8] * 8
