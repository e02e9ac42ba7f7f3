"""The API groups Triton's restricted-API flags name, and the scopes Naiad's keys grant."""

from __future__ import annotations

import enum


class Api(enum.Enum):
    """Triton's API groups (``--http-restricted-api``/``--grpc-restricted-protocol`` names)."""

    HEALTH = "health"
    METADATA = "metadata"
    INFERENCE = "inference"
    SHARED_MEMORY = "shared-memory"
    MODEL_CONFIG = "model-config"
    MODEL_REPOSITORY = "model-repository"
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"


class Scope(enum.Enum):
    """What a bearer key may do: run inference, read server state, or change it (admin: anything)."""

    INFER = "infer"
    READ = "read"
    ADMIN = "admin"


#: The scope a call needs, or ``None`` for calls anyone may make: health probes (load balancers and
#: Kubernetes probes carry no credentials).
Need = Scope | None
