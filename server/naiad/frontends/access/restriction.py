"""Triton's restricted APIs: ``<api>[,<api>...]:<header>=<value>``, one flag per header.

A restricted API answers only requests that carry the header with exactly that value; everything
else is refused with Triton's message.  Header names compare case-insensitively (HTTP's rule, and
gRPC metadata keys are lower case); values compare exactly.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from naiad.frontends.access.groups import Api


def parse_restrictions(
    values: Sequence[str], header_prefix: str = "", feature: str = "api"
) -> dict[Api, tuple[str, str]]:
    """API -> (header, value) from the flag values; ``header_prefix`` is prepended to each header
    (gRPC's ``triton-grpc-protocol-``, as tritonserver does).  Raises ``ValueError`` with the reason,
    in Triton's words, which call an API a ``feature`` ("api" for HTTP, "protocol" for gRPC)."""
    restricted: dict[Api, tuple[str, str]] = {}
    for value in values:
        apis, colon, setting = value.partition(":")
        header, equals, expected = setting.partition("=")
        if not colon or not equals or not apis or not header.strip():
            raise ValueError(f"expected <apis>:<header>=<value>, got '{value}'")
        for name in apis.split(","):
            try:
                api = Api(name.strip())
            except ValueError:
                allowed = ", ".join(a.value for a in Api)
                raise ValueError(
                    f"unknown restricted {feature} '{name.strip()}' (allowed: {allowed})"
                ) from None
            if api in restricted:
                raise ValueError(
                    f"restricted {feature} '{api.value}' can not be specified in multiple config groups"
                )
            restricted[api] = ((header_prefix + header.strip()).lower(), expected)
    return restricted


class Restrictions:
    """The restricted APIs of one frontend."""

    def __init__(self, restricted: dict[Api, tuple[str, str]]) -> None:
        self._restricted = restricted

    def __bool__(self) -> bool:
        return bool(self._restricted)

    def refusal(self, api: Api, headers: dict[str, str]) -> str | None:
        """Triton's message when ``headers`` (lower-case names) lack the API's header, else ``None``."""
        rule = self._restricted.get(api)
        if rule is None:
            return None
        header, expected = rule
        got = headers.get(header)
        if got is not None and hmac.compare_digest(got.encode(), expected.encode()):
            return None
        return header
