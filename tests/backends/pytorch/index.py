"""Waiting for a server's repository index to settle, for tests of models that fail to load."""

from __future__ import annotations

import time

from tests.support.http import RawClient


def settled_index(raw: RawClient, names: set[str], timeout: float = 30) -> dict[str, dict[str, str]]:
    """The index entries by model name, once each of ``names`` is READY or UNAVAILABLE with a reason.

    A model still loading can be listed UNAVAILABLE with no reason yet, which is not its final word.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entries = {e["name"]: e for e in raw.request("POST", "/v2/repository/index").json()}
        if all(_settled(entries.get(name, {})) for name in names):
            return entries
        time.sleep(0.05)
    raise AssertionError(f"models {sorted(names)} did not settle")


def _settled(entry: dict[str, str]) -> bool:
    return entry.get("state") == "READY" or (
        entry.get("state") == "UNAVAILABLE" and bool(entry.get("reason"))
    )
