"""The tables Triton logs at start: the models once its start-up loads are done (``| Model | Version |
Status |``), what a user reads first in a server's log to see what loaded and why the rest did not; and
the server's options (``| Option | Value |``, its rows made by the composition root).

Laid out as Triton lays it out: one row per version the loads tried, by model name then version, a
status of ``READY`` or ``UNAVAILABLE: <reason>``, each line of a reason that spans lines on a row of
its own with the other cells empty; models whose versions were never known (a config that does not
parse) are not in it, as in Triton's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from naiad.repository.manager import IndexEntry
from naiad.repository.model import ModelState

HEADER = ("Model", "Version", "Status")
OPTIONS_HEADER = ("Option", "Value")


def model_rows(index: Iterable[IndexEntry]) -> list[tuple[str, str, str]]:
    """The table's rows from the repository index: versions that loaded or failed to."""
    rows = []
    for entry in index:
        if not entry.version or entry.state not in (ModelState.READY.value, ModelState.UNAVAILABLE.value):
            continue
        status = entry.state if entry.state == ModelState.READY.value else f"{entry.state}: {entry.reason}"
        rows.append((entry.name, entry.version, status.rstrip()))
    return rows


def table(rows: Sequence[tuple[str, ...]], header: tuple[str, ...] = HEADER) -> str:
    """``rows`` boxed as Triton boxes its tables (no trailing newline)."""
    lines: list[tuple[str, ...]] = []
    for row in rows:
        cells = [cell.split("\n") for cell in row]
        for index in range(max(len(cell) for cell in cells)):
            lines.append(tuple(cell[index] if index < len(cell) else "" for cell in cells))
    widths = [max(len(line[column]) for line in (header, *lines)) for column in range(len(header))]
    rule = "+" + "+".join("-" * (width + 2) for width in widths) + "+"

    def framed(line: tuple[str, ...]) -> str:
        cells = (f" {cell.ljust(width)} " for cell, width in zip(line, widths, strict=True))
        return "|" + "|".join(cells) + "|"

    return "\n".join([rule, framed(header), rule, *(framed(line) for line in lines), rule])
