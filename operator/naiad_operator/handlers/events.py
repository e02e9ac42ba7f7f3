"""Kubernetes Events about the operator's objects, posted through kopf's queue.

kopf types ``kopf.event`` for its own ``Body`` views, while the handlers hold the raw objects the API
returned; posting goes through here so that conversion lives in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import kopf


def post(obj: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
    """An Event of ``type`` (Normal or Warning) about ``obj``; kopf sends it in the background."""
    kopf.event(kopf.Body(cast(kopf.RawBody, obj)), type=type, reason=reason, message=message)
