"""Serving from ``s3://`` (SeaweedFS, real signatures) and ``gs://`` (the GCS emulator) repositories."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.repository.clients import eventually
from tests.repository.conftest import ServerFactory, connect
from tests.repository.models import marked_py, write_marked
from tests.support.object_store import GcsEmulator, SeaweedS3, upload_tree
from tests.support.server import free_port


@pytest.fixture(scope="module")
def protocol() -> str:
    """What is tested here does not depend on the protocol (the API is covered over both elsewhere)."""
    return "http"


def _bucket() -> str:
    return f"models-{uuid.uuid4().hex[:8]}"


def test_s3_repository_with_an_endpoint_and_reload_of_new_content(
    tmp_path: Path, s3: SeaweedS3, serve: ServerFactory, protocol: str
) -> None:
    source = tmp_path / "source"
    write_marked(source, "alpha", "s3")
    write_marked(source, "beta", "s3b")
    bucket = _bucket()
    s3.client().create_bucket(Bucket=bucket)
    upload_tree(s3, bucket, "team/repo", source)
    cache = tmp_path / "cache"
    args = ("--model-control-mode=explicit", "--load-model=alpha", f"--repository-cache-dir={cache}")
    with serve(s3.uri(bucket, "team/repo"), *args, env=s3.env()) as server:
        client = connect(protocol, server)
        assert client.mark("alpha") == "s3:1"
        assert {e["name"] for e in client.index()} == {"alpha", "beta"}
        # a new version uploaded to the bucket is fetched by the next load
        s3.client().put_object(Bucket=bucket, Key="team/repo/alpha/2/model.py", Body=marked_py("v2").encode())
        client.load("alpha")
        assert client.mark("alpha") == "v2:2"
        client.close()
    (entry,) = cache.iterdir()
    assert (entry / "current").is_symlink() and (entry / ".objects" / "sha256").is_dir()


def test_s3_repository_in_poll_mode_applies_a_change_at_the_scan_that_sees_it(
    tmp_path: Path, s3: SeaweedS3, serve: ServerFactory, protocol: str
) -> None:
    """A synced snapshot is complete (every object of it arrived and was checked), so a change in a
    cloud repository is applied at the first scan that sees it, as Triton applies it, not one scan
    later as a local folder still being written is (NVIDIA's L0_storage_S3_local checks a new version
    20 s after uploading it, with Triton's 15 s interval)."""
    source = tmp_path / "source"
    write_marked(source, "alpha", "s3")
    bucket = _bucket()
    s3.client().create_bucket(Bucket=bucket)
    upload_tree(s3, bucket, "", source)
    args = ("--model-control-mode=poll", "--repository-poll-secs=1", "--log-verbose=1")
    with serve(s3.uri(bucket), *args, f"--repository-cache-dir={tmp_path / 'cache'}", env=s3.env()) as server:
        client = connect(protocol, server)
        assert client.mark("alpha") == "s3:1"
        s3.client().put_object(Bucket=bucket, Key="alpha/2/model.py", Body=marked_py("v2").encode())
        assert eventually(lambda: client.mark("alpha") == "v2:2")
        assert "changed in the repository: loading" in server.log()
        assert "waiting until settled" not in server.log()
        client.close()


def test_s3_repository_with_bad_credentials_fails_the_start(tmp_path: Path, s3: SeaweedS3) -> None:
    bucket = _bucket()
    s3.client().create_bucket(Bucket=bucket)
    upload_tree(s3, bucket, "", write_marked(tmp_path / "source", "alpha").parent)
    command = [sys.executable, "-m", "naiad", "serve", f"--model-repository={s3.uri(bucket)}"]
    command += [f"--{kind}-port={free_port()}" for kind in ("http", "grpc", "metrics")]
    command += [f"--repository-cache-dir={tmp_path / 'cache'}"]
    env = dict(os.environ, **s3.env(secret_key="wrong"))
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "failed to read the model repository" in done.stderr and "access refused" in done.stderr


def test_gcs_repository(tmp_path: Path, gcs: GcsEmulator, serve: ServerFactory, protocol: str) -> None:
    source = tmp_path / "source"
    write_marked(source, "alpha", "gs")
    bucket = _bucket()
    gcs.client().create_bucket(bucket)
    upload_tree(gcs, bucket, "repo", source)
    args = (f"--repository-cache-dir={tmp_path / 'cache'}",)
    with serve(f"gs://{bucket}/repo", *args, env=gcs.env()) as server:
        client = connect(protocol, server)
        assert client.mark("alpha") == "gs:1"
        client.close()
