"""Access control on the HTTP routes: which API group and scope each route is, and the refusals.

Restricted APIs answer Triton's 403 ``{"error":"This API is restricted, expecting header '<h>'"}``;
bearer keys answer 401 (with ``WWW-Authenticate: Bearer``) without a valid token and 403 with one
that lacks the scope.  Unknown routes are not classified: they stay 404 for everyone, as in Triton.
"""

from __future__ import annotations

from naiad.frontends.access.groups import Api, Need, Scope
from naiad.frontends.access.policy import AccessPolicy, Refusal
from naiad.frontends.http.errors import error_body

Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]

_JSON = (b"content-type", b"application/json")
_MODEL_ACTIONS: dict[str, tuple[Api, Need]] = {
    "": (Api.METADATA, Scope.READ),
    "ready": (Api.HEALTH, None),
    "config": (Api.MODEL_CONFIG, Scope.READ),
    "stats": (Api.STATISTICS, Scope.READ),
    "infer": (Api.INFERENCE, Scope.INFER),
    "generate": (Api.INFERENCE, Scope.INFER),
    "generate_stream": (Api.INFERENCE, Scope.INFER),
}


def classify(method: str, segments: list[str]) -> tuple[Api, Need] | None:
    """The API group and scope of a route (``segments`` of the path), ``None`` for unknown routes."""
    if not segments or segments[0] != "v2":
        return None
    rest = segments[1:]
    changes = Scope.ADMIN if method == "POST" else Scope.READ
    if not rest:
        return Api.METADATA, Scope.READ
    head = rest[0]
    if head == "health":
        return Api.HEALTH, None
    if head == "repository":
        return Api.MODEL_REPOSITORY, Scope.READ if rest[-1] == "index" else Scope.ADMIN
    if head in ("systemsharedmemory", "cudasharedmemory"):
        return Api.SHARED_MEMORY, Scope.READ if rest[-1] == "status" else Scope.ADMIN
    if head == "logging":
        return Api.LOGGING, changes
    if head == "trace" or rest[-2:] == ["trace", "setting"]:
        return Api.TRACE, changes
    if head == "models" and len(rest) >= 2:
        if rest[1:] == ["stats"]:
            return Api.STATISTICS, Scope.READ
        action = rest[4:] if len(rest) >= 4 and rest[2] == "versions" else rest[2:]
        return _MODEL_ACTIONS.get(action[0] if action else "")
    return None


def refusal(
    policy: AccessPolicy, method: str, segments: list[str], headers: dict[bytes, bytes]
) -> Answer | None:
    """The answer refusing this call, or ``None`` when it may go on."""
    route = classify(method, segments)
    if route is None:
        return None
    api, need = route
    text = {name.decode("latin-1"): value.decode("latin-1") for name, value in headers.items()}
    denial = policy.check(api, need, text)
    if denial is None:
        return None
    if denial.reason is Refusal.RESTRICTED:
        return 403, error_body(f"This API is restricted, expecting header '{denial.message}'"), [_JSON]
    if denial.reason is Refusal.UNAUTHENTICATED:
        return 401, error_body(denial.message), [_JSON, (b"www-authenticate", b'Bearer realm="naiad"')]
    return 403, error_body(denial.message), [_JSON]
