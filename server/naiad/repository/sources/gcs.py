"""Google Cloud Storage: ``gs://bucket/prefix``.

Credentials follow google-auth's standard order (``GOOGLE_APPLICATION_CREDENTIALS``, workload identity,
the metadata server); ``STORAGE_EMULATOR_HOST`` points the client at an emulator with anonymous
credentials, as the library itself does.  Reads pin the generation that was listed and check the
CRC32C the listing reported, so an object rewritten mid-sync is detected even by stores that ignore
preconditions.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import google_crc32c
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.cloud import storage

from naiad.repository.sources.base import (
    CredentialsError,
    LocationNotFound,
    ObjectChanged,
    ObjectInfo,
    Sink,
    SourceError,
)


def parse_gs_uri(uri: str) -> tuple[str, str]:
    """``gs://bucket/prefix`` -> ``(bucket, prefix)``."""
    if not uri.startswith("gs://"):
        raise ValueError(f"not a GCS URI: {uri}")
    bucket, _, prefix = uri[len("gs://") :].partition("/")
    if not bucket:
        raise ValueError(f"GCS URI names no bucket: {uri}")
    return bucket, prefix.strip("/")


class _Writer:
    """A file-like object for ``download_to_file`` that feeds the sink and the CRC32C."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.crc = google_crc32c.Checksum()  # type: ignore[no-untyped-call]  # the package has no types
        self.size = 0

    def write(self, data: bytes) -> int:
        self.crc.update(data)  # type: ignore[no-untyped-call]
        self.size += len(data)
        self.sink(bytes(data))
        return len(data)


class GcsSource:
    """Objects under ``gs://bucket/prefix``; the token is ``generation/crc32c``."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.bucket_name, prefix = parse_gs_uri(uri)
        self._base = f"{prefix}/" if prefix else ""
        try:
            self._client: Any = storage.Client()
        except auth_exc.DefaultCredentialsError as exc:
            raise CredentialsError(f"{uri}: no usable Google credentials: {exc}") from exc
        self._bucket = self._client.bucket(self.bucket_name)

    def list(self) -> Iterator[ObjectInfo]:
        try:
            for blob in self._client.list_blobs(self.bucket_name, prefix=self._base):
                key = blob.name[len(self._base) :]
                if key:
                    yield ObjectInfo(key, int(blob.size or 0), f"{blob.generation}/{blob.crc32c or ''}")
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError) as exc:
            raise self._translate(exc, None) from exc

    def read(self, info: ObjectInfo, sink: Sink, start: int = 0, end: int | None = None) -> None:
        generation, _, crc = info.token.partition("/")
        stop = info.size if end is None else end
        if stop <= start:
            return
        whole = start == 0 and stop == info.size
        blob = self._bucket.blob(self._base + info.key, generation=int(generation))
        writer = _Writer(sink)
        try:
            blob.download_to_file(
                writer,
                start=None if whole else start,
                end=None if whole else stop - 1,
                if_generation_match=int(generation),
                checksum=None,
            )
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError) as exc:
            raise self._translate(exc, info.key) from exc
        if writer.size != stop - start:
            raise ObjectChanged(
                f"{self.uri}/{info.key}: received {writer.size} bytes, expected {stop - start}"
            )
        if whole and crc:
            digest: bytes = writer.crc.digest()  # type: ignore[no-untyped-call]
            if base64.b64encode(digest).decode() != crc:
                raise ObjectChanged(f"{self.uri}/{info.key}: content does not match the CRC32C listed")

    def close(self) -> None:
        self._client.close()

    def _translate(self, exc: Exception, key: str | None) -> SourceError:
        where = f"{self.uri}/{key}" if key else self.uri
        if isinstance(exc, auth_exc.GoogleAuthError | gexc.Unauthorized | gexc.Forbidden):
            return CredentialsError(f"{where}: access refused: {exc}")
        if isinstance(exc, gexc.NotFound | gexc.PreconditionFailed):
            if key is None:
                return LocationNotFound(f"{where}: bucket '{self.bucket_name}' does not exist")
            return ObjectChanged(f"{where}: object vanished or changed during the sync")
        return SourceError(f"{where}: {exc}")
