"""Pod and container security contexts shared by server pods and sync Jobs.

Both run non-root with a read-only root filesystem and no capabilities (the "restricted" Pod Security
Standard), so a namespace can enforce it; writable space is an emptyDir at /tmp. ``fsGroup`` makes the
repository volume writable for the sync Job's user and readable for the servers'.
"""

from __future__ import annotations

from typing import Any

USER = 1000


def pod(fixed_ids: bool = True) -> dict[str, Any]:
    """``fixed_ids=False`` leaves the user, group and fsGroup to the platform: OpenShift's
    ``restricted-v2`` assigns them from the namespace's range and rejects any other fixed value.
    ``OnRootMismatch`` spares a large claim the recursive chown on every pod start."""
    context: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    if fixed_ids:
        context.update(
            runAsUser=USER, runAsGroup=USER, fsGroup=USER, fsGroupChangePolicy="OnRootMismatch"
        )
    return context


def container() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
