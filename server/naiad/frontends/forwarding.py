"""Header forwarding (``--http-header-forward-pattern``, ``--grpc-header-forward-pattern``).

Request headers whose name matches the pattern become string parameters of the inference request,
under the header's name, so a model can read them (Python: ``request.parameters()``).  As in Triton
the pattern may match anywhere in the name and ignores case; a forwarded header replaces a request
parameter of the same name, which is also what a Python model sees in Triton (it gets both, and
JSON keeps the last).  The ``authorization`` header is never forwarded: credentials stay out of
models and their logs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from naiad.core.request import InferRequest

_NEVER = frozenset({"authorization"})


class HeaderForwarding:
    def __init__(self, pattern: str) -> None:
        """``re.error`` for a pattern that does not compile."""
        self._pattern = re.compile(pattern, re.IGNORECASE)

    def apply(self, request: InferRequest, headers: Iterable[tuple[str, str]]) -> None:
        search = self._pattern.search
        for name, value in headers:
            if search(name) and name.lower() not in _NEVER:
                request.parameters[name] = value
