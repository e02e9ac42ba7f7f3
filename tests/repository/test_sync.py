"""``naiad repo sync``: content addressing, snapshots, the atomic ``current``, incremental and
resumable syncs, GC, layout validation, error kinds, and the JSON summary the operator reads."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pty
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from naiad.repository.sources.s3 import S3Source, parse_s3_uri
from naiad.repository.sync.engine import SyncError, SyncOptions, sync

from tests.repository.models import write_marked
from tests.support.object_store import GcsEmulator, SeaweedS3, upload_tree


def naiad_sync(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "naiad", "repo", "sync", *args]
    return subprocess.run(
        command, env=dict(os.environ, **(env or {})), capture_output=True, text=True, timeout=timeout
    )


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    repo = tmp_path / "source"
    write_marked(repo, "alpha", "a", versions=(1, 2))
    write_marked(repo, "beta", "b")
    (repo / "beta" / "labels.txt").write_text("cat\ndog\n")
    (repo / "ensemble" / "1").mkdir(parents=True)
    (repo / "ensemble" / "config.pbtxt").write_text('name: "ensemble"\nplatform: "ensemble"\n')
    return repo


@pytest.fixture
def bucket(s3: SeaweedS3, source: Path) -> Iterator[str]:
    name = f"sync-{uuid.uuid4().hex[:8]}"
    s3.client().create_bucket(Bucket=name)
    upload_tree(s3, name, "repo", source)
    yield name


@pytest.fixture
def s3_env(s3: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    return s3.env()


def test_local_sync_builds_a_content_addressed_snapshot(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    result = sync(str(source), dest)
    current = dest / "current"
    assert current.is_symlink() and not os.readlink(current).startswith("/")
    assert tree(current) == tree(source)
    assert (current / "ensemble" / "1").is_dir()
    # every file is a read-only hard link to its blob; identical contents are stored once
    model_a1 = current / "alpha" / "1" / "model.py"
    digest = hashlib.sha256(model_a1.read_bytes()).hexdigest()
    blob = dest / ".objects" / "sha256" / digest[:2] / digest
    assert (
        model_a1.stat().st_ino == blob.stat().st_ino == (current / "alpha" / "2" / "model.py").stat().st_ino
    )
    assert stat.S_IMODE(blob.stat().st_mode) == 0o444
    summary = result.to_json()
    assert summary["result"] == "Succeeded" and summary["snapshot"]["switched"]
    assert summary["objects"] == {"listed": 7, "copied": 7, "reused": 0}
    models = {m["name"]: m for m in summary["models"]}
    assert [v["version"] for v in models["alpha"]["versions"]] == [1, 2]
    # two versions with the same files have the same content hash
    assert models["alpha"]["versions"][0]["content_hash"] == models["alpha"]["versions"][1]["content_hash"]
    assert models["beta"]["backend"] == "python" and models["ensemble"]["valid"]


def test_resync_is_incremental_and_switches_atomically(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    first = sync(str(source), dest)
    again = sync(str(source), dest)
    assert again.snapshot == first.snapshot and again.objects_copied == 0 and again.bytes_copied == 0
    assert again.to_json()["result"] == "NoChange"
    (source / "beta" / "1" / "model.py").write_text("changed = True\n")
    changed = sync(str(source), dest)
    assert (changed.objects_copied, changed.objects_reused) == (1, 6)
    assert changed.snapshot != first.snapshot
    assert os.readlink(dest / "current") == f"snapshots/{changed.snapshot}"
    # the old snapshot is intact: a server that loaded from it keeps reading what it loaded
    assert (first.snapshot_path / "beta" / "1" / "model.py").read_text() != "changed = True\n"
    summary = {m["name"]: m for m in changed.to_json()["models"]}
    before = {m["name"]: m for m in first.to_json()["models"]}
    assert summary["beta"]["versions"] != before["beta"]["versions"]
    assert summary["alpha"]["versions"] == before["alpha"]["versions"]


def test_gc_keeps_the_last_snapshots_and_drops_unreferenced_objects(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    ids = []
    for round_ in range(4):
        (source / "beta" / "1" / "model.py").write_text(f"round = {round_}\n")
        ids.append(sync(str(source), dest, SyncOptions(keep=2)).snapshot)
    assert sorted(p.name for p in (dest / "snapshots").iterdir()) == sorted(ids[-2:])
    blobs = list((dest / ".objects" / "sha256").rglob("*"))
    assert all(b.stat().st_nlink >= 2 for b in blobs if b.is_file())
    assert tree(dest / "current")["beta/1/model.py"] == b"round = 3\n"


def test_gc_keeps_protected_snapshots_beyond_keep(source: Path, tmp_path: Path) -> None:
    """``--protect`` (what the operator passes for snapshots InferenceServices pin): GC keeps it however
    many syncs came after it, and the pinned folder still holds what it held."""
    dest = tmp_path / "dest"
    ids = []
    for round_ in range(4):
        (source / "beta" / "1" / "model.py").write_text(f"round = {round_}\n")
        args = [str(source), str(dest), "--keep", "1", "--json"]
        if ids:
            args += ["--protect", f"sha256:{ids[0]}"]
        done = naiad_sync(*args)
        assert done.returncode == 0, done.stderr
        ids.append(json.loads(done.stdout)["snapshot"]["id"].removeprefix("sha256:"))
    assert sorted(p.name for p in (dest / "snapshots").iterdir()) == sorted({ids[0], ids[-1]})
    assert tree(dest / "snapshots" / ids[0])["beta/1/model.py"] == b"round = 0\n"
    unprotected = naiad_sync(str(source), str(dest), "--keep", "1")  # nothing protected: it goes
    assert unprotected.returncode == 0, unprotected.stderr
    assert [p.name for p in (dest / "snapshots").iterdir()] == [ids[-1]]
    refused = naiad_sync(str(source), str(dest), "--protect", "latest")
    assert refused.returncode == 2 and "sha256:<64 hex digits>" in refused.stderr


def test_verify_rehashes_and_repairs_a_corrupted_object(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    first = sync(str(source), dest)
    victim = first.snapshot_path / "beta" / "labels.txt"
    victim.chmod(0o644)
    victim.write_text("corrupted\n")  # through a hard link: the blob itself is damaged
    assert sync(str(source), dest).objects_copied == 0  # ETag/size still match: trusted
    repaired = sync(str(source), dest, SyncOptions(verify=True))
    assert repaired.objects_copied == 1
    assert (dest / "current" / "beta" / "labels.txt").read_text() == "cat\ndog\n"


def test_invalid_layout_fails_and_leaves_current_alone(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    good = sync(str(source), dest)
    (source / "beta" / "config.pbtxt").write_text("name: 'beta' input [ {")
    (source / "orphan").mkdir()
    (source / "orphan" / "config.pbtxt").write_text('name: "orphan"\n')
    done = naiad_sync(str(source), str(dest), "--json")
    assert done.returncode == 6, done.stderr
    document = json.loads(done.stdout)
    assert document["result"] == "Failed" and document["error"]["kind"] == "validation"
    errors = {m["name"]: m["errors"] for m in document["models"] if m["errors"]}
    assert set(errors) == {"beta", "orphan"}
    assert "has no numeric version folder" in errors["orphan"][0]
    assert os.readlink(dest / "current") == f"snapshots/{good.snapshot}"


def test_s3_sync_and_incremental_by_etag(
    bucket: str, s3: SeaweedS3, s3_env: dict[str, str], source: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "dest"
    done = naiad_sync(s3.uri(bucket, "repo"), str(dest), "--json", env=s3_env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["objects"] == {"listed": 7, "copied": 7, "reused": 0}
    assert tree(dest / "current") == tree(source)
    assert (dest / "current" / "ensemble" / "1").is_dir()
    s3.client().put_object(Bucket=bucket, Key="repo/alpha/3/model.py", Body=b"v3")
    again = sync(s3.uri(bucket, "repo"), dest)
    assert (again.objects_copied, again.objects_reused, again.bytes_copied) == (1, 7, 2)
    assert [v.version for v in again.models[0].versions] == [1, 2, 3]


def test_gcs_sync(gcs: GcsEmulator, source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in gcs.env().items():
        monkeypatch.setenv(key, value)
    name = f"sync-{uuid.uuid4().hex[:8]}"
    gcs.client().create_bucket(name)
    upload_tree(gcs, name, "", source)
    dest = tmp_path / "dest"
    first = sync(f"gs://{name}", dest)
    assert tree(dest / "current") == tree(source)
    assert (dest / "current" / "ensemble" / "1").is_dir()
    assert sync(f"gs://{name}", dest).objects_copied == 0
    assert first.objects_listed == 7


def test_large_objects_arrive_in_parallel_ranges(
    s3: SeaweedS3, s3_env: dict[str, str], tmp_path: Path
) -> None:
    name = f"sync-{uuid.uuid4().hex[:8]}"
    s3.client().create_bucket(Bucket=name)
    payload = os.urandom(5 * 1024 * 1024 + 123)
    s3.client().put_object(Bucket=name, Key="big/1/model.onnx", Body=payload)
    result = sync(s3.uri(name), tmp_path / "dest", SyncOptions(part_size=1024 * 1024, parallel=4))
    assert (tmp_path / "dest" / "current" / "big" / "1" / "model.onnx").read_bytes() == payload
    assert result.bytes_copied == len(payload)


@pytest.mark.parametrize(
    ("secret", "bucket_name", "status", "kind"),
    [("wrong", None, 3, "credentials"), (None, "no-such-bucket-here", 4, "not_found")],
)
def test_source_errors_exit_with_their_kind_and_leave_current_alone(
    bucket: str,
    s3: SeaweedS3,
    tmp_path: Path,
    secret: str | None,
    bucket_name: str | None,
    status: int,
    kind: str,
) -> None:
    dest = tmp_path / "dest"
    assert naiad_sync(s3.uri(bucket, "repo"), str(dest), env=s3.env()).returncode == 0
    before = os.readlink(dest / "current")
    env = s3.env(secret_key=secret) if secret else s3.env()
    done = naiad_sync(s3.uri(bucket_name or bucket, "repo"), str(dest), "--json", env=env)
    assert done.returncode == status, done.stdout + done.stderr
    assert json.loads(done.stdout)["error"]["kind"] == kind
    assert os.readlink(dest / "current") == before


def test_empty_prefix_is_not_found(bucket: str, s3: SeaweedS3) -> None:
    done = naiad_sync(s3.uri(bucket, "no/such/prefix"), "/tmp/never-written", env=s3.env())
    assert done.returncode == 4 and "no objects found" in done.stderr


@pytest.mark.parametrize("mutation", ["delete", "overwrite"])
def test_an_object_changing_mid_sync_fails_it_and_leaves_current_alone(
    bucket: str,
    s3: SeaweedS3,
    s3_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mutation: str,
) -> None:
    dest = tmp_path / "dest"
    uri = s3.uri(bucket, "repo")
    sync(uri, dest)
    before = os.readlink(dest / "current")
    s3.client().put_object(Bucket=bucket, Key="repo/beta/1/model.py", Body=b"new content")
    location = parse_s3_uri(uri)
    real_read = S3Source.read

    def read_after_the_bucket_changed(self: S3Source, info: Any, *args: Any) -> None:
        key = f"{location.prefix}/{info.key}"
        if mutation == "delete":
            s3.client().delete_object(Bucket=location.bucket, Key=key)
        else:
            s3.client().put_object(Bucket=location.bucket, Key=key, Body=b"rewritten again")
        real_read(self, info, *args)

    monkeypatch.setattr(S3Source, "read", read_after_the_bucket_changed)
    with pytest.raises(SyncError) as failure:
        sync(uri, dest)
    assert failure.value.kind == "changed" and "vanished or changed" in failure.value.message
    assert os.readlink(dest / "current") == before


def test_a_killed_sync_resumes_without_downloading_again(
    s3: SeaweedS3, s3_env: dict[str, str], tmp_path: Path
) -> None:
    name = f"sync-{uuid.uuid4().hex[:8]}"
    client = s3.client()
    client.create_bucket(Bucket=name)
    client.put_object(Bucket=name, Key="m/config.pbtxt", Body=b'backend: "python"\n')
    with ThreadPoolExecutor(8) as pool:
        keys = [f"m/1/part{i:04d}.bin" for i in range(400)]
        list(pool.map(lambda key: client.put_object(Bucket=name, Key=key, Body=os.urandom(32 * 1024)), keys))
    dest = tmp_path / "dest"
    command = [
        sys.executable,
        "-m",
        "naiad",
        "repo",
        "sync",
        s3.uri(name),
        str(dest),
        "--parallel=1",
        "--json",
    ]
    process = subprocess.Popen(
        command, env=dict(os.environ, **s3_env), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    journal = dest / ".state" / "journal.jsonl"
    deadline = time.monotonic() + 60
    while not (journal.exists() and journal.read_text().count("\n") >= 40):
        assert process.poll() is None, "the sync finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    assert not (dest / "current").exists()  # nothing half-done is ever visible
    done = naiad_sync(s3.uri(name), str(dest), "--json", env=s3_env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["objects"]["reused"] >= 40
    assert summary["objects"]["copied"] + summary["objects"]["reused"] == 401
    assert len(tree(dest / "current")) == 401
    assert not any((dest / ".objects" / "tmp").iterdir())


def test_one_sync_at_a_time(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / ".state").mkdir(parents=True)
    with (dest / ".state" / "lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        done = naiad_sync(str(source), str(dest))
    assert done.returncode == 7 and "another sync is running" in done.stderr


def test_progress_is_shown_on_a_terminal(source: Path, tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    command = [sys.executable, "-m", "naiad", "repo", "sync", str(source), str(tmp_path / "dest")]
    done = subprocess.run(command, stderr=follower, stdout=subprocess.PIPE, text=True, timeout=60)
    os.close(follower)
    shown = os.read(leader, 65536).decode()
    os.close(leader)
    assert done.returncode == 0
    assert "downloading 7/7 objects" in shown and "\r" in shown
    assert done.stdout.startswith("Succeeded: sha256:")


def test_unsupported_locations_are_refused(tmp_path: Path) -> None:
    done = naiad_sync("ftp://example.com/models", str(tmp_path / "dest"))
    assert done.returncode == 1 and "unsupported repository location" in done.stderr
    serve = subprocess.run(
        [sys.executable, "-m", "naiad", "serve", "--model-repository=as://account/container"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert serve.returncode == 2 and "expected a folder, s3://... or gs://..." in serve.stderr
