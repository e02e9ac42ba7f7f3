"""C's ``atoi``, for settings Triton reads with it: leading blanks and a sign, then the digits up to
the first other character; 0 when there are none (``"12ms"`` is 12, ``"abc"`` is 0).  Naiad takes
what Triton takes, so that a value Triton starts with starts Naiad the same way."""

from __future__ import annotations

import re

_LEADING_INTEGER = re.compile(r"\s*([+-]?\d+)")


def atoi(text: str) -> int:
    match = _LEADING_INTEGER.match(text)
    return int(match.group(1)) if match else 0
