"""Which versions of a model to serve: Triton's version policy applied to a snapshot's versions.

The operator, not the server, resolves the policy, because a rollout must know the target versions
before it asks any pod to load them (to keep the old ones loaded meanwhile).
"""

from __future__ import annotations

from collections.abc import Iterable

from naiad_operator.api.inferenceservice import VersionPolicy


class InvalidPolicy(ValueError):
    """The policy names versions the snapshot does not have (``InvalidSpec``)."""


def select_versions(policy: VersionPolicy, available: Iterable[int]) -> list[int]:
    """The versions to serve, ascending; raises :class:`InvalidPolicy` when none or missing ones."""
    versions = sorted(set(available))
    if not versions:
        raise InvalidPolicy("the repository has no versions of this model")
    if policy.specific is not None:
        missing = sorted(set(policy.specific.versions) - set(versions))
        if missing:
            raise InvalidPolicy(
                f"versions {', '.join(map(str, missing))} are not in the repository "
                f"(it has {', '.join(map(str, versions))})"
            )
        return sorted(set(policy.specific.versions))
    if policy.all is not None:
        return versions
    count = policy.latest.num_versions if policy.latest is not None else 1
    return versions[-count:]
