"""Which source a repository location names: ``s3://``, ``gs://``, or a local folder."""

from __future__ import annotations

from pathlib import Path

from naiad.repository.sources.base import ObjectSource

REMOTE_SCHEMES = ("s3://", "gs://")


def is_remote(location: str) -> bool:
    return location.startswith(REMOTE_SCHEMES)


def open_source(location: str, connections: int = 16) -> ObjectSource:
    """The source for ``location``; cloud SDKs are imported only when a cloud location is used."""
    if location.startswith("s3://"):
        from naiad.repository.sources.s3 import S3Source

        return S3Source(location, connections)
    if location.startswith("gs://"):
        from naiad.repository.sources.gcs import GcsSource

        return GcsSource(location)
    if "://" in location:
        raise ValueError(f"unsupported repository location '{location}': expected s3://, gs:// or a folder")
    from naiad.repository.sources.local import LocalSource

    return LocalSource(Path(location).expanduser().absolute())
