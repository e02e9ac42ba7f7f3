"""Listing the repositories: what a scan and a lookup find, and when a folder's listing is reused."""

from __future__ import annotations

import os
import time
from pathlib import Path

from naiad.repository.layout import (
    ModelLocation,
    RepositoryListing,
    Root,
    locate,
    model_key,
    namespaces_of,
    split_key,
)

HOUR_NS = 3600 * 10**9


def _models(root: Path, *names: str) -> None:
    for name in names:
        (root / name / "1").mkdir(parents=True)


def _age(folder: Path, seconds: int = 3600) -> int:
    """Set ``folder``'s mtime ``seconds`` in the past; return it (ns)."""
    mtime_ns = time.time_ns() - seconds * 10**9
    os.utime(folder, ns=(mtime_ns, mtime_ns))
    return mtime_ns


def test_a_scan_lists_model_folders_by_name_with_duplicates(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _models(first, "m2", "m1", ".hidden")
    _models(second, "m1", "m3")
    (first / "notes.txt").write_text("not a model")
    found = RepositoryListing().scan([Root(first), Root(second), Root(tmp_path / "missing")])
    assert list(found) == ["m1", "m2", "m3"]
    assert found["m1"] == ModelLocation("m1", first / "m1", (second / "m1",))
    assert found["m3"] == ModelLocation("m3", second / "m3")


def test_locate_reads_only_the_named_folder(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _models(first, "m1", ".hidden")
    _models(second, "m1", "m2")
    (first / "file").write_text("")
    roots = [Root(first), Root(second), Root(tmp_path / "missing")]
    assert locate(roots, "m1") == ModelLocation("m1", first / "m1", (second / "m1",))
    assert locate(roots, "m2") == ModelLocation("m2", second / "m2")
    for name in ("nope", ".hidden", "file", "..", "", "m1/1"):
        assert locate(roots, name) is None, name


def test_namespaced_repositories_each_hold_their_own_model_of_a_name(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _models(first, "m1", "m2")
    _models(second, "m1")
    roots = [Root(first, "repo-a"), Root(second, "repo-b")]
    found = RepositoryListing().scan(roots)
    a1, b1 = model_key("m1", "repo-a"), model_key("m1", "repo-b")
    assert sorted(found) == sorted([a1, model_key("m2", "repo-a"), b1])
    assert found[a1] == ModelLocation("m1", first / "m1", namespace="repo-a")
    assert found[b1] == ModelLocation("m1", second / "m1", namespace="repo-b")
    assert found[b1].key == b1 and split_key(b1) == ("m1", "repo-b") and split_key("m1") == ("m1", "")
    assert locate(roots, b1) == found[b1]
    assert locate(roots, model_key("m2", "repo-b")) is None
    assert namespaces_of(roots, "m1") == [a1, b1]
    assert namespaces_of(roots, "m2") == [model_key("m2", "repo-a")]
    assert namespaces_of(roots, "nope") == [] and namespaces_of(roots, "..") == []


def test_an_unchanged_folder_is_listed_once_and_any_change_is_seen(tmp_path: Path) -> None:
    _models(tmp_path, "m1", "m2")
    settled = _age(tmp_path)
    listing = RepositoryListing()
    first = listing.scan([Root(tmp_path)])
    # Reused: a folder changed behind the listing's back, its mtime put back, is not relisted.
    (tmp_path / "m2").rename(tmp_path / "m9")
    os.utime(tmp_path, ns=(settled, settled))
    assert listing.scan([Root(tmp_path)]) == first
    # Any real change moves the mtime, so the next scan lists the folder again.
    _models(tmp_path, "m3")
    assert list(listing.scan([Root(tmp_path)])) == ["m1", "m3", "m9"]
    (tmp_path / "m1").rename(tmp_path / ".m1")
    assert list(listing.scan([Root(tmp_path)])) == ["m3", "m9"]


def test_a_recently_changed_folder_is_never_reused(tmp_path: Path) -> None:
    """Two changes within the file system's timestamp granularity leave the mtime equal."""
    _models(tmp_path, "m1")
    listing = RepositoryListing()
    recent = time.time_ns()
    os.utime(tmp_path, ns=(recent, recent))
    assert list(listing.scan([Root(tmp_path)])) == ["m1"]
    _models(tmp_path, "m2")
    os.utime(tmp_path, ns=(recent, recent))
    assert list(listing.scan([Root(tmp_path)])) == ["m1", "m2"]


def test_a_folder_holding_a_link_is_never_reused(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "repo", tmp_path / "elsewhere"
    _models(root, "m1")
    _models(elsewhere, "linked")
    (root / "linked").symlink_to(elsewhere / "linked")
    settled = _age(root)
    listing = RepositoryListing()
    assert list(listing.scan([Root(root)])) == ["linked", "m1"]
    (elsewhere / "linked" / "1").rmdir()
    (elsewhere / "linked").rmdir()  # the link now dangles; the repository folder is untouched
    assert os.stat(root).st_mtime_ns == settled
    assert list(listing.scan([Root(root)])) == ["m1"]


def test_a_root_that_goes_away_lists_nothing(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    _models(root, "m1")
    _age(root)
    listing = RepositoryListing()
    assert list(listing.scan([Root(root)])) == ["m1"]
    (root / "m1" / "1").rmdir()
    (root / "m1").rmdir()
    root.rmdir()
    assert listing.scan([Root(root)]) == {}
    root.write_text("a file now")
    assert listing.scan([Root(root)]) == {}
