"""When a model blocked by a failed load is tried again.

A failed rollout records what failed (the target's content hashes and override fingerprint) and is not
repeated while nothing changes, since repeating a deterministic failure every pass only churns the pods.
Three things make it worth another try: the spec that decides whether a load can work changed (the
override, which is part of what is tried, or the server's resources, GPUs and placement); the user asked
(the :data:`RETRY_ANNOTATION`'s value changed); or the failure looked transient (out of memory, a
timeout), which is retried on its own after a back-off that doubles per failed attempt, up to a cap. The
clock is the caller's, so the times in status follow from the pass's ``now``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from naiad_operator import GROUP
from naiad_operator.api.inferenceservice import InferenceServiceSpec, ModelStatus

#: An InferenceService annotation; any new value retries every blocked model once more.
RETRY_ANNOTATION = f"{GROUP}/retry-models"

#: First automatic retry after a transient failure, and the most the doubling back-off waits.
BACKOFF_SECONDS = 30.0
BACKOFF_CAP_SECONDS = 1800.0

_TRANSIENT = re.compile(
    r"out of memory|\bOOM\b|MemoryError|Cannot allocate memory|timed? ?out|TimeoutError|deadline exceeded"
    r"|resource exhausted|Killed",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Attempt:
    """What a pass knows about the circumstances of a load attempt."""

    now: datetime = datetime(1970, 1, 1, tzinfo=UTC)
    spec: str | None = None
    """:func:`spec_fingerprint` of the InferenceService."""
    token: str | None = None
    """The :data:`RETRY_ANNOTATION`'s value."""


def fingerprint(value: Any) -> str | None:
    """A short stable hash of JSON-able ``value``; None for nothing (no override is not an override)."""
    if not value:
        return None
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def spec_fingerprint(spec: InferenceServiceSpec) -> str | None:
    """The parts of the pod spec a failed load may depend on: memory and GPUs, and where pods run."""
    template = spec.pod_template
    return fingerprint(
        {
            "resources": spec.server.resources.model_dump(),
            "gpus": spec.server.gpus,
            "image": spec.server.image,
            "nodeSelector": template.node_selector,
            "affinity": template.affinity,
            "tolerations": template.tolerations,
            "runtimeClassName": template.runtime_class_name,
        }
    )


def retry_token(annotations: Mapping[str, str] | None) -> str | None:
    return (annotations or {}).get(RETRY_ANNOTATION)


def transient(message: str) -> bool:
    """The server's reason reads like a failure that may pass by itself (memory, time)."""
    return bool(_TRANSIENT.search(message))


def backoff(retries: int) -> timedelta:
    """Wait before automatic retry number ``retries`` (1 is the first): doubling, capped."""
    return timedelta(seconds=min(BACKOFF_SECONDS * 2 ** max(0, retries - 1), BACKOFF_CAP_SECONDS))


def due(record: ModelStatus, attempt: Attempt) -> bool:
    """A blocked attempt should be made again now."""
    if record.blocked_spec != attempt.spec or record.blocked_retry != attempt.token:
        return True
    if record.next_retry is None:
        return False
    return attempt.now >= parse_time(record.next_retry)


def parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
