"""Shared pieces of the typed API: camelCase models and Kubernetes-style conditions.

The CRDs speak camelCase JSON; Python speaks snake_case. One base class maps the two, so the spec and
status models read like Python and serialize exactly as the CRD schema expects.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class CamelModel(BaseModel):
    """Parses camelCase (or snake_case) keys and dumps camelCase; unknown keys are ignored so an
    operator older than its CRD still reads newer objects."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def dump(self) -> dict[str, Any]:
        """The JSON form for the API server: camelCase, without unset optional fields."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(CamelModel):
    """One ``status.conditions[]`` entry (the ``metav1.Condition`` shape)."""

    type: str
    status: ConditionStatus
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None
