"""S3 and S3-compatible stores, with the URI forms Triton accepts.

``s3://bucket/prefix`` uses AWS; ``s3://host:port/bucket/prefix`` an S3-compatible endpoint over
HTTP, and ``s3://https://host:port/bucket/prefix`` (or ``http://``) names the scheme.  Credentials
come from boto3's standard chain (environment, shared config and profile, web identity, instance
metadata), so a Kubernetes Job needs nothing beyond what the AWS SDKs already read.

Every read is conditional on the ETag listed (``If-Match``): an object rewritten mid-sync fails with
:class:`ObjectChanged` instead of mixing two versions of a model.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

from naiad.repository.sources.base import (
    CredentialsError,
    LocationNotFound,
    ObjectChanged,
    ObjectInfo,
    Sink,
    SourceError,
)

_CHUNK = 1 << 20
_DENIED = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "Forbidden",
    "403",
}
_GONE = {"NoSuchKey", "PreconditionFailed", "404", "412", "InvalidRange"}


@dataclass(frozen=True, slots=True)
class S3Location:
    """A parsed ``s3://`` URI; ``endpoint`` is ``None`` for AWS itself."""

    bucket: str
    prefix: str
    endpoint: str | None = None


def parse_s3_uri(uri: str) -> S3Location:
    """Split Triton's ``s3://[[http[s]://]host:port/]bucket[/prefix]`` forms."""
    if not uri.startswith("s3://"):
        raise ValueError(f"not an S3 URI: {uri}")
    rest = uri[len("s3://") :]
    endpoint = None
    for scheme in ("http://", "https://"):
        if rest.startswith(scheme):
            host, _, rest = rest[len(scheme) :].partition("/")
            endpoint = scheme + host
            break
    else:
        first, _, tail = rest.partition("/")
        if ":" in first:
            endpoint, rest = "http://" + first, tail
    bucket, _, prefix = rest.partition("/")
    if not bucket or (endpoint is not None and endpoint.endswith("//")):
        raise ValueError(f"S3 URI names no bucket: {uri}")
    return S3Location(bucket, prefix.strip("/"), endpoint)


class S3Source:
    """Objects under ``s3://bucket/prefix``; one client, shared by the download threads."""

    def __init__(self, uri: str, connections: int = 16) -> None:
        self.uri = uri
        self.location = parse_s3_uri(uri)
        # botocore reads neither setting from the environment; the operator's pods set them by name
        style = os.environ.get("NAIAD_S3_ADDRESSING_STYLE")
        config = Config(
            max_pool_connections=max(10, connections),
            retries={"max_attempts": 5, "mode": "standard"},
            connect_timeout=10,
            read_timeout=60,
            s3={"addressing_style": style} if style in ("auto", "path", "virtual") else None,
        )
        verify = os.environ.get("NAIAD_S3_VERIFY_TLS", "true").lower() not in ("false", "0", "no")
        self._client: Any = boto3.session.Session().client(
            "s3", endpoint_url=self.location.endpoint, config=config, verify=None if verify else False
        )
        self._base = f"{self.location.prefix}/" if self.location.prefix else ""

    def list(self) -> Iterator[ObjectInfo]:
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.location.bucket, Prefix=self._base):
                for item in page.get("Contents", ()):
                    key = item["Key"][len(self._base) :]
                    if key:
                        yield ObjectInfo(key, int(item["Size"]), str(item["ETag"]))
        except (ClientError, BotoCoreError) as exc:
            raise self._translate(exc, None) from exc

    def read(self, info: ObjectInfo, sink: Sink, start: int = 0, end: int | None = None) -> None:
        stop = info.size if end is None else end
        if stop <= start:
            return
        arguments: dict[str, Any] = {
            "Bucket": self.location.bucket,
            "Key": self._base + info.key,
            "IfMatch": info.token,
        }
        if start or stop != info.size:
            arguments["Range"] = f"bytes={start}-{stop - 1}"
        try:
            body = self._client.get_object(**arguments)["Body"]
            received = 0
            try:
                for chunk in body.iter_chunks(_CHUNK):
                    received += len(chunk)
                    sink(chunk)
            finally:
                body.close()
        except (ClientError, BotoCoreError) as exc:
            raise self._translate(exc, info.key) from exc
        if received != stop - start:
            raise ObjectChanged(f"{self.uri}/{info.key}: received {received} bytes, expected {stop - start}")

    def close(self) -> None:
        self._client.close()

    def _translate(self, exc: Exception, key: str | None) -> SourceError:
        where = f"{self.uri}/{key}" if key else self.uri
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            return CredentialsError(f"{where}: no usable AWS credentials: {exc}")
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            message = error.get("Message") or code
            if code in _DENIED or status == "403":
                return CredentialsError(f"{where}: access refused ({code}): {message}")
            if code == "NoSuchBucket":
                return LocationNotFound(f"{where}: bucket '{self.location.bucket}' does not exist")
            if key is not None and (code in _GONE or status in _GONE):
                return ObjectChanged(f"{where}: object vanished or changed during the sync ({code})")
            return SourceError(f"{where}: {code}: {message}")
        return SourceError(f"{where}: {exc}")
