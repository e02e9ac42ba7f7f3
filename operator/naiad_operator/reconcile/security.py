"""Pod and container security contexts shared by server pods and sync Jobs.

Both run non-root with a read-only root filesystem and no capabilities (the "restricted" Pod Security
Standard), so a namespace can enforce it; writable space is an emptyDir at /tmp. ``fsGroup`` makes the
repository volume writable for the sync Job's user and readable for the servers'.
"""

from __future__ import annotations

from typing import Any

USER = 1000


def pod() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": USER,
        "runAsGroup": USER,
        "fsGroup": USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
