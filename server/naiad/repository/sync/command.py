"""``naiad repo sync``: run the sync engine and report, for people (text) or the operator (``--json``).

With ``--json`` stdout carries exactly one JSON document, the summary or ``{"result": "Failed",
"error": {"kind", "message"}}``, so a Job's log is machine-readable; the exit status tells the kind
of failure apart (:data:`~naiad.repository.sync.engine.EXIT_STATUS`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from naiad.repository.sync.engine import EXIT_STATUS, SyncError, SyncOptions, SyncResult, sync
from naiad.repository.sync.progress import Progress, human_size


def run(
    source: str,
    dest: Path,
    *,
    keep: int,
    verify: bool,
    parallel: int,
    as_json: bool,
    protect: set[str] | None = None,
) -> int:
    """Sync and print the outcome; the process exit status. ``protect``: snapshot ids (folder names)
    that GC keeps beyond ``keep``, e.g. the ones servers are pinned to."""
    options = SyncOptions(keep=keep, verify=verify, parallel=parallel, protect=set(protect or ()))
    try:
        result = sync(source, dest, options, Progress())
    except SyncError as exc:
        document: dict[str, Any] = {
            "result": "Failed",
            "source": source,
            "destination": str(dest),
            "error": {"kind": exc.kind, "message": exc.message},
        }
        if isinstance(exc.details, SyncResult):
            document["models"] = [m.to_json() for m in exc.details.models]
        if as_json:
            print(json.dumps(document, indent=2))
        else:
            print(f"naiad repo sync: {exc.kind}: {exc.message}", file=sys.stderr)
            for model in document.get("models", []):
                for error in model["errors"]:
                    print(f"  {model['name']}: {error}", file=sys.stderr)
        return EXIT_STATUS.get(exc.kind, 1)
    summary = result.to_json()
    if as_json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"{summary['result']}: {summary['snapshot']['id']}")
    print(f"  current -> {summary['snapshot']['path']}")
    print(
        f"  objects: {result.objects_listed} listed, {result.objects_copied} copied, "
        f"{result.objects_reused} reused; {human_size(result.bytes_copied)} downloaded "
        f"in {result.duration:.1f}s"
    )
    for model in result.models:
        versions = ", ".join(str(v.version) for v in model.versions)
        print(f"  {model.name}: versions {versions}")
    for warning in [*result.warnings, *(w for m in result.models for w in m.warnings)]:
        print(f"  warning: {warning}")
    if result.removed_snapshots:
        print(
            f"  gc: removed {len(result.removed_snapshots)} snapshots, {result.removed_objects} objects "
            f"({human_size(result.freed_bytes)})"
        )
    return 0
