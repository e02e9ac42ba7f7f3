"""The one background thread behind the "per interval" gauges (CPU, GPU), as Triton polls them.

Sampling ``/proc`` and NVML off the event loop keeps scrapes and requests from waiting on them; a
scrape then reads the latest sample, so a fast scraper does not make the server sample faster.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Protocol

log = logging.getLogger("naiad.metrics")


class Source(Protocol):
    def sample(self) -> None:
        """Refresh the values the next scrape reads."""
        ...


class Poller:
    """``Poller(sources, interval_ms).start()``, later ``stop()``."""

    def __init__(self, sources: Sequence[Source], interval_ms: int) -> None:
        self._sources = list(sources)
        self._interval = interval_ms / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="naiad-metrics", daemon=True)

    def start(self) -> None:
        if self._sources:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            for source in self._sources:
                try:
                    source.sample()
                except Exception:  # one bad reading must not end the polling
                    log.exception("sampling metrics failed")
