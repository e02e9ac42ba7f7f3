"""A request's model version as Triton reads it, over HTTP and gRPC alike.

Triton reads the version text with C++'s ``std::stol`` (``"01"`` is version 1, leading blanks and a sign
are taken, digits after them up to anything else), so a client that names ``01`` gets version 1's
answer (its metadata says ``"1"``), and a number past 64 bits is refused in its words.
"""

from __future__ import annotations

import re

from naiad.core.errors import InvalidArgumentError

_VERSION = re.compile(r"\s*([+-]?\d+)")


def model_version(text: str) -> str:
    """The version a request names, read as Triton reads it ("" = latest; ``"01"`` is 1)."""
    if not text:
        return ""
    match = _VERSION.match(text)
    number = int(match.group(1)) if match else None
    if number is None or not -(2**63) <= number < 2**63:
        raise InvalidArgumentError(
            f"failed to get model version from specified version string '{text}' (details: stol), "
            "version should be an integral value > 0"
        )
    if number < 0:
        raise InvalidArgumentError(
            f"invalid model version specified '{text}' , version should be an integral value > 0"
        )
    return str(number)
