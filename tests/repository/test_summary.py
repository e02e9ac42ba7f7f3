"""The model table logged once the start-up loads are done, laid out as Triton 2.51 lays it out (its
log for a READY model and one whose ``initialize`` raised, read side by side)."""

from __future__ import annotations

from naiad.repository.manager import IndexEntry
from naiad.repository.summary import model_rows, table


def test_rows_are_the_versions_the_loads_tried_with_their_status() -> None:
    index = [
        IndexEntry("bad", "1", "UNAVAILABLE", "RuntimeError: boom\n\nAt:\n  model.py(3): initialize\n"),
        IndexEntry("broken_config", "", "UNAVAILABLE", "failed to read text proto"),  # no version known
        IndexEntry("never_loaded"),
        IndexEntry("ok", "2", "READY", "", 1024),
        IndexEntry("ok", "3", "LOADING"),
    ]
    assert model_rows(index) == [
        ("bad", "1", "UNAVAILABLE: RuntimeError: boom\n\nAt:\n  model.py(3): initialize"),
        ("ok", "2", "READY"),
    ]


def test_a_status_of_several_lines_takes_a_row_each_with_the_other_cells_empty() -> None:
    rows = [("bad", "1", "UNAVAILABLE: Internal: RuntimeError: boom\n\nAt:\n  model.py(3): initialize"), ("ok", "2", "READY")]
    assert table(rows) == "\n".join(
        [
            "+-------+---------+-------------------------------------------+",
            "| Model | Version | Status                                    |",
            "+-------+---------+-------------------------------------------+",
            "| bad   | 1       | UNAVAILABLE: Internal: RuntimeError: boom |",
            "|       |         |                                           |",
            "|       |         | At:                                       |",
            "|       |         |   model.py(3): initialize                 |",
            "| ok    | 2       | READY                                     |",
            "+-------+---------+-------------------------------------------+",
        ]
    )


def test_an_empty_repository_still_has_its_header() -> None:
    assert table([]) == "\n".join(
        [
            "+-------+---------+--------+",
            "| Model | Version | Status |",
            "+-------+---------+--------+",
            "+-------+---------+--------+",
        ]
    )
