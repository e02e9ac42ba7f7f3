"""C's ``atoi`` and C++'s ``stoi``, for settings Triton reads with them: leading blanks and a sign,
then the digits up to the first other character (``"12ms"`` is 12); with none, ``atoi`` gives 0 and
``stoi`` fails.  Naiad takes what Triton takes, so that a value Triton starts with starts Naiad the
same way."""

from __future__ import annotations

import re

_LEADING_INTEGER = re.compile(r"\s*([+-]?\d+)")


def atoi(text: str) -> int:
    match = _LEADING_INTEGER.match(text)
    return int(match.group(1)) if match else 0


def stoi(text: str) -> int:
    """C++'s ``std::stoi``, for settings Triton's backends read with it: as :func:`atoi`, but text
    that starts with no number is an error (``ValueError``) rather than 0."""
    match = _LEADING_INTEGER.match(text)
    if match is None:
        raise ValueError(text)
    return int(match.group(1))
