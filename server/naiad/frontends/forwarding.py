"""Header forwarding (``--http-header-forward-pattern``, ``--grpc-header-forward-pattern``).

Request headers whose name matches the pattern become string parameters of the inference request,
under the header's name, so a model can read them (Python: ``request.parameters()``).  As in Triton
the pattern may match anywhere in the name and ignores case unless it starts by turning that off, as
RE2 (Triton's regex library) spells it: ``(?-i)MY_HEADER.*`` (Python's ``re`` takes such a group only
scoped, so the leading flags are read here).  A forwarded header replaces a request parameter of the
same name, which is also what a Python model sees in Triton (it gets both, and JSON keeps the last).
A header named as one of Triton's reserved parameters (``sequence_id``, ``priority``...) or starting
with ``triton_`` fails the request, as in current Triton, rather than reaching the model as a
parameter it would take for the server's own.  The ``authorization`` header is never forwarded:
credentials stay out of models and their logs.

HTTP header names arrive lowercased (ASGI's rule): a model sees ``host`` where Triton, which keeps
the case a client sent, gives ``Host``.  gRPC metadata keys are lowercase everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from naiad.core.errors import InvalidArgumentError
from naiad.core.request import RESERVED_PARAMETERS, InferRequest

_NEVER = frozenset({"authorization"})

#: A leading RE2 flag group that turns flags off, ``(?-i)`` or ``(?s-i)``, which ``re`` refuses as global.
_LEADING_FLAGS = re.compile(r"\(\?([ims]*)-([ims]+)\)")
_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """``pattern`` as Triton reads it: case-insensitive, unless its leading flags say otherwise;
    ``re.error`` for one that does not compile."""
    flags = re.IGNORECASE
    leading = _LEADING_FLAGS.match(pattern)
    if leading is not None:
        for name in leading.group(1):
            flags |= _FLAGS[name]
        for name in leading.group(2):
            flags &= ~_FLAGS[name]
        pattern = pattern[leading.end() :]
    return re.compile(pattern, flags)


class HeaderForwarding:
    def __init__(self, pattern: str) -> None:
        """``re.error`` for a pattern that does not compile."""
        self._pattern = compile_pattern(pattern)

    def apply(self, request: InferRequest, headers: Iterable[tuple[str, str]]) -> None:
        """Add the matching headers to ``request``'s parameters; INVALID_ARG for a reserved name."""
        search = self._pattern.search
        for name, value in headers:
            if search(name) and name.lower() not in _NEVER:
                if name in RESERVED_PARAMETERS or name.startswith("triton_"):
                    raise InvalidArgumentError(
                        f"Header '{name}' is reserved for Triton usage and cannot be forwarded."
                    )
                request.parameters[name] = value
