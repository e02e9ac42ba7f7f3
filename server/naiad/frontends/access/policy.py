"""One frontend's access decision: Triton's restricted APIs first, then Naiad's bearer keys."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from naiad.frontends.access.groups import Api, Need
from naiad.frontends.access.keyring import Keyring
from naiad.frontends.access.restriction import Restrictions

_BEARER = "bearer "


class Refusal(enum.Enum):
    """Why a call is refused; each frontend maps these to its statuses."""

    RESTRICTED = "restricted"  # Triton: the restricted API's header is missing or wrong
    UNAUTHENTICATED = "unauthenticated"  # no bearer token, or one no key has
    FORBIDDEN = "forbidden"  # a valid key without the scope the call needs


@dataclass(frozen=True, slots=True)
class Denial:
    reason: Refusal
    message: str


class AccessPolicy:
    """``restrictions`` (Triton's flags for this frontend) and ``keyring`` (``--auth-key-file``)."""

    def __init__(self, restrictions: Restrictions, keyring: Keyring | None) -> None:
        self.restrictions = restrictions
        self.keyring = keyring

    @property
    def active(self) -> bool:
        """Whether any call can be refused at all (else frontends skip the check)."""
        return bool(self.restrictions) or self.keyring is not None

    def check(self, api: Api, need: Need, headers: dict[str, str]) -> Denial | None:
        """Why a call to ``api`` needing ``need`` with ``headers`` (lower-case names) is refused."""
        header = self.restrictions.refusal(api, headers)
        if header is not None:
            return Denial(Refusal.RESTRICTED, header)
        if self.keyring is None or need is None:
            return None
        authorization = headers.get("authorization", "")
        if not authorization[: len(_BEARER)].lower() == _BEARER:
            return Denial(Refusal.UNAUTHENTICATED, "missing bearer token")
        key = self.keyring.match(authorization[len(_BEARER) :].strip())
        if key is None:
            return Denial(Refusal.UNAUTHENTICATED, "invalid bearer token")
        if not key.allows(need):
            return Denial(
                Refusal.FORBIDDEN, f"key '{key.name}' lacks the '{need.value}' scope needed for this call"
            )
        return None
