"""What the repository knows about each model and each of its versions."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from naiad.core.signature import ModelSignature
from naiad.scheduling.scheduler import Scheduler


class ModelState(enum.Enum):
    """Triton's model version states, as the repository index reports them."""

    UNKNOWN = "UNKNOWN"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"


@dataclass(slots=True)
class ModelVersion:
    """One version: its state, why it is in that state, and its scheduler once READY."""

    version: int
    state: ModelState = ModelState.LOADING
    reason: str = ""
    scheduler: Scheduler | None = None


@dataclass(slots=True)
class Model:
    """A model the repository has tried to load.

    ``config`` and ``signature`` are ``None`` when the model failed before its configuration could be
    read; ``reason`` then says why and the model has no versions.
    """

    name: str
    path: Path
    config: Any = None
    signature: ModelSignature | None = None
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    reason: str = ""
    config_json: dict[str, Any] | None = None

    @property
    def platform(self) -> str:
        if self.config is None:
            return ""
        return str(self.config.platform or self.config.backend)

    @property
    def decoupled(self) -> bool:
        return bool(self.config is not None and self.config.model_transaction_policy.decoupled)

    def ready_versions(self) -> list[int]:
        return sorted(v for v, mv in self.versions.items() if mv.state is ModelState.READY)

    @property
    def state(self) -> ModelState:
        """READY if any version is; otherwise the state of the model as a whole."""
        if self.ready_versions():
            return ModelState.READY
        if not self.versions:  # not past its configuration yet, unless that failed
            return ModelState.UNAVAILABLE if self.reason else ModelState.LOADING
        if any(mv.state is ModelState.LOADING for mv in self.versions.values()):
            return ModelState.LOADING
        return ModelState.UNAVAILABLE
