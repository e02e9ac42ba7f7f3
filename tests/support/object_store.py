"""Real object stores for tests and benchmarks: SeaweedFS for S3 and gcp-storage-emulator for GCS.

Both run as their own processes on free ports, as a cloud bucket would be another machine: the code
under test talks to them through the real SDKs (boto3, google-cloud-storage) over HTTP.  SeaweedFS
checks credentials, so "bad credentials" is a real signature failure and not a mock's opinion.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support.server import free_port

ACCESS_KEY = "naiad-test"
SECRET_KEY = "naiad-test-secret"


def _wait_http(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {process.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # it answers: an error status is still an answer
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout}s:\n{log.read_text()}")


class SeaweedS3:
    """``weed server`` with its S3 gateway on a free port; every other port it opens is free too."""

    def __init__(self, data_dir: Path | None = None) -> None:
        self._owned = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="naiad-seaweed-"))
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / "weed.log"
        #: Each service's gRPC port: SeaweedFS also listens on a Unix socket in /tmp named after it,
        #: which a killed server leaves behind (see :meth:`stop`).
        self._grpc_ports = {kind: free_port() for kind in ("master", "volume", "filer", "s3")}

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> dict[str, str]:
        """What a process needs to reach this store through the standard boto3 credential chain."""
        return {
            "AWS_ACCESS_KEY_ID": access_key,
            "AWS_SECRET_ACCESS_KEY": secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def uri(self, bucket: str, prefix: str = "") -> str:
        """Triton's form for an S3-compatible endpoint: ``s3://http://host:port/bucket/prefix``."""
        return f"s3://{self.endpoint}/{bucket}" + (f"/{prefix}" if prefix else "")

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
        )

    def start(self) -> SeaweedS3:
        weed = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
        config = self.data_dir / "s3.json"
        identity = {"name": "admin", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}]}
        identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
        config.write_text(json.dumps({"identities": [identity]}))
        ports = {name: free_port() for name in ("master", "volume", "filer")}
        command = [
            weed,
            f"-logdir={self.data_dir}",  # (its glog files, in the system's temporary folder otherwise)
            "server",
            f"-dir={self.data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            f"-master.port={ports['master']}",
            f"-master.port.grpc={self._grpc_ports['master']}",
            f"-volume.port={ports['volume']}",
            f"-volume.port.grpc={self._grpc_ports['volume']}",
            # each bucket takes a handful of volumes; small volumes leave room for many buckets
            "-volume.max=0",
            "-master.volumeSizeLimitMB=128",
            "-filer",
            f"-filer.port={ports['filer']}",
            f"-filer.port.grpc={self._grpc_ports['filer']}",
            f"-filer.localSocket={self.data_dir}/filer.sock",
            "-s3",
            f"-s3.port={self.port}",
            f"-s3.port.grpc={self._grpc_ports['s3']}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={self.data_dir}/s3.sock",
            f"-s3.config={config}",
            f"-iam.port={free_port()}",
            f"-metricsPort={free_port()}",
        ]
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        try:
            _wait_http(self.endpoint, self.process, self.log_path, 60)
            self._wait_writable()
        except BaseException:  # (``with`` never calls ``__exit__`` then: the server would outlive the tests)
            self.stop()
            raise
        return self

    def _wait_writable(self, timeout: float = 60) -> None:
        """The gateway answers before a volume is assigned; wait until a write goes through.  (A try
        whose bucket was made but whose write failed leaves the bucket: the next tries reuse it, where
        making it again failed every try until the deadline, "BucketAlreadyOwnedByYou".)"""
        client = self.client()
        deadline = time.monotonic() + timeout
        while True:
            try:
                with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                    client.create_bucket(Bucket="naiad-probe")
                client.put_object(Bucket="naiad-probe", Key="probe", Body=b"x")
                client.delete_object(Bucket="naiad-probe", Key="probe")
                client.delete_bucket(Bucket="naiad-probe")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        # SeaweedFS ignores SIGTERM for many seconds; its data is throwaway, so SIGKILL is right.
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for kind, port in self._grpc_ports.items():
            Path(f"/tmp/seaweedfs-{kind}-grpc-{port}.sock").unlink(missing_ok=True)  # (/tmp whatever TMPDIR says)
        if self._owned:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class GcsEmulator:
    """``gcp-storage-emulator`` in memory on a free port; clients find it by ``STORAGE_EMULATOR_HOST``."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = Path(tempfile.mkstemp(prefix="naiad-gcs-", suffix=".log")[1])

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.endpoint, "GOOGLE_CLOUD_PROJECT": "naiad-test"}

    def client(self) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project="naiad-test",
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": self.endpoint},
        )

    def start(self) -> GcsEmulator:
        emulator = shutil.which("gcp-storage-emulator") or str(
            Path(sys.executable).parent / "gcp-storage-emulator"
        )
        command = [emulator, "start", "--host=127.0.0.1", f"--port={self.port}", "--in-memory"]
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        try:
            _wait_http(f"{self.endpoint}/storage/v1/b", self.process, self.log_path, 30)
        except BaseException:  # (as SeaweedS3.start: no ``__exit__`` would stop it)
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> GcsEmulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def upload_tree(store: SeaweedS3 | GcsEmulator, bucket: str, prefix: str, root: Path) -> list[str]:
    """Upload every file under ``root`` to ``bucket/prefix/...``, and a ``folder/`` marker for every
    empty folder (as cloud consoles do); the keys, sorted."""
    objects: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_file():
            objects[relative] = path.read_bytes()
        elif path.is_dir() and not any(path.iterdir()):
            objects[relative + "/"] = b""
    keys = {"/".join(filter(None, [prefix, relative])): body for relative, body in objects.items()}
    if isinstance(store, SeaweedS3):
        client = store.client()
        for key, body in keys.items():
            client.put_object(Bucket=bucket, Key=key, Body=body)
    else:
        target = store.client().bucket(bucket)
        for key, body in keys.items():
            target.blob(key).upload_from_string(body)
    return sorted(keys)
