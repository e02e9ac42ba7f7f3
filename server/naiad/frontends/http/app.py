"""The KServe v2 HTTP/REST frontend, as a plain ASGI application.

Routing is a split of the raw path, not a framework: the inference endpoint is the hot path (thousands
of requests a second on one core), and each layer of middleware costs there.  Every handler decodes,
calls the :class:`~naiad.dataplane.DataPlane`, and encodes; errors become Triton's ``{"error": ...}``
body with the status from :mod:`naiad.frontends.http.errors`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_to_bytes

import orjson

from naiad.codecs import json_v2
from naiad.codecs.version import model_version
from naiad.core.errors import InferenceServerError, InvalidArgumentError, RankError, UnsupportedError
from naiad.core.verbose import infer_failed
from naiad.dataplane import DataPlane
from naiad.frontends.access.policy import AccessPolicy
from naiad.frontends.forwarding import HeaderForwarding
from naiad.frontends.http import extensions, generate, shared_memory
from naiad.frontends.http.access import refusal
from naiad.frontends.http.asgi import Receive, Scope, Send
from naiad.frontends.http.body import compress, decompress, read_body, response_encoding
from naiad.frontends.http.disconnect import DisconnectWatch
from naiad.frontends.http.errors import error_body, status_of
from naiad.repository.peers import FORWARDED_HEADER, Peer
from naiad.tracing.trace import Trace

if TYPE_CHECKING:
    from naiad.frontends.http.relay import HttpRelay

log = logging.getLogger("naiad.http")

_JSON = (b"content-type", b"application/json")
_OCTET = (b"content-type", b"application/octet-stream")
_TEXT = (b"content-type", b"text/plain")
_FORWARDED = FORWARDED_HEADER.encode()
#: Model endpoints a server answers for a model only a peer holds, by asking the peer.
_PEER_ACTIONS = frozenset({"", "ready", "config", "infer", "generate", "generate_stream"})


#: libevhtp's ``htp_method`` numbers, which Triton's ``HTTP request: <method> <path>`` verbose line prints.
_METHOD_CODES = {
    method: code
    for code, method in enumerate(
        ("GET", "HEAD", "POST", "PUT", "DELETE", "MKCOL", "COPY", "MOVE", "OPTIONS", "PROPFIND",
         "PROPPATCH", "LOCK", "UNLOCK", "TRACE", "CONNECT", "PATCH")
    )
}  # fmt: skip

#: A handler's answer: status, body (bytes, or chunks to stream) and headers.
_Reply = tuple[int, bytes | AsyncGenerator[bytes, None], list[tuple[bytes, bytes]]]


@dataclass(slots=True)
class _Call:
    """What a handler needs from one HTTP request."""

    method: str
    segments: list[str]
    headers: dict[bytes, bytes]
    receive: Receive
    trace: Trace | None = None
    #: The path and query as the client sent them (what a request forwarded to a peer asks for).
    target: bytes = b""
    #: An inference's request id, once its body is read ("" before; Triton's verbose failure line).
    request_id: str | None = None


class HttpFrontend:
    """ASGI app: ``HttpFrontend(dataplane, max_input_size)``."""

    def __init__(
        self,
        dataplane: DataPlane,
        *,
        max_input_size: int = 64 * 1024 * 1024,
        access: AccessPolicy | None = None,
        forwarding: HeaderForwarding | None = None,
    ) -> None:
        """``access``: restricted APIs and bearer keys; ``forwarding``: headers passed to models."""
        self.dataplane = dataplane
        self.max_input_size = max_input_size
        self.access = access if access is not None and access.active else None
        self.forwarding = forwarding
        self._disconnects = DisconnectWatch()
        self._relay: HttpRelay | None = None
        if dataplane.peers is not None:
            # imported only for a server with peers: aiohttp is most of a frontend's import time
            from naiad.frontends.http.relay import HttpRelay

            self._relay = HttpRelay()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await _lifespan(receive, send)
            return
        target: bytes = scope.get("raw_path") or scope["path"].encode()
        query = target.find(b"?")
        raw_path = target[:query] if query >= 0 else target
        if query < 0 and scope.get("query_string"):
            target += b"?" + scope["query_string"]
        if log.isEnabledFor(logging.DEBUG):  # Triton's line, with libevhtp's method number
            method = _METHOD_CODES.get(scope["method"], 16)
            log.debug("HTTP request: %d %s", method, raw_path.decode("latin-1"))
        try:
            segments = _segments(raw_path)
        except InvalidArgumentError as exc:
            await _send(send, 400, error_body(exc.message))
            return
        headers = dict(scope["headers"])
        call = _Call(scope["method"], segments, headers, receive, target=target)
        try:
            status, body, extra = await self._route(call)
        except InferenceServerError as exc:
            status, body, extra = status_of(exc), error_body(exc.message), []
            if call.request_id is not None and log.isEnabledFor(logging.DEBUG):
                log.debug(infer_failed(call.request_id, exc.message))
        except Exception as exc:  # a bug must cost one request, never the server
            log.exception("unhandled error serving %s %s", scope["method"], scope["path"])
            status, body, extra = 500, error_body(f"internal error: {type(exc).__name__}: {exc}"), []
        trace = call.trace
        if trace is not None:
            trace.sending()
        await _send(send, status, body, extra)
        if trace is not None:
            self.dataplane.tracer.end(trace)

    async def _route(self, call: _Call) -> _Reply:
        s = call.segments
        if self.access is not None:
            refused = refusal(self.access, call.method, s, call.headers)
            if refused is not None:
                return refused
        if not s or s[0] != "v2":
            return _not_found()
        n = len(s)
        if n >= 3 and s[1] == "models":
            if s[2] == "stats" and n == 3:
                return await self._stats(call, "", "") if call.method == "GET" else _not_allowed()
            if n == 5 and s[3] == "trace" and s[4] == "setting":
                return await self._trace_setting(call, s[2])
            name = s[2]
            version = ""
            rest = s[3:]
            if len(rest) >= 2 and rest[0] == "versions":
                if not rest[1].isdigit():
                    return _not_found()
                version = model_version(rest[1])  # (as Triton reads it: "01" is version 1)
                rest = rest[2:]
            action = rest[0] if rest else ""
            if len(rest) > 1:
                return _not_found()
            handler = self._model_routes.get(action)
            if handler is None:
                return _not_found()
            method, fn = handler
            if call.method != method:
                return _not_allowed()
            if self._relay is not None and action in _PEER_ACTIONS:
                peer = self.dataplane.peer(name, version, _FORWARDED in call.headers)
                if peer is not None:
                    return await self._forward(call, peer, name)
            return await fn(self, call, name, version)
        if n == 1:
            if call.method != "GET":
                return _not_allowed()
            return 200, orjson.dumps(self.dataplane.server_metadata()), [_JSON]
        if n == 3 and s[1] == "health" and s[2] in ("live", "ready"):
            if call.method != "GET":
                return _not_allowed()
            ok = self.dataplane.live() if s[2] == "live" else self.dataplane.ready()
            return (200 if ok else 400), b"", [_TEXT]
        if n >= 3 and s[1] == "repository":
            if call.method != "POST":
                return _not_allowed()
            return await self._repository(call, s[2:])
        if n == 3 and s[1] == "trace" and s[2] == "setting":
            return await self._trace_setting(call, "")
        if n == 2 and s[1] == "logging":
            if call.method not in ("GET", "POST"):
                return _not_allowed()
            body = await read_body(call.receive, None, self.max_input_size) if call.method == "POST" else None
            return 200, await extensions.logging_setting(self.dataplane, body), [_JSON]
        if n >= 3 and s[1] in ("systemsharedmemory", "cudasharedmemory"):
            return await self._shared_memory(call, s[1], s[2:])
        return _not_found()

    async def close(self) -> None:
        """Close the connections to peers (at exit)."""
        if self._relay is not None:
            await self._relay.close()

    async def _forward(self, call: _Call, peer: Peer, name: str) -> _Reply:
        """The answer of ``peer``, which holds model ``name`` that this server does not serve."""
        assert self._relay is not None
        length = call.headers.get(b"content-length")
        try:
            declared = int(length) if length is not None else None
        except ValueError:
            raise InvalidArgumentError("invalid Content-Length header") from None
        body = await read_body(call.receive, declared, self.max_input_size)
        self.dataplane.forwarded(name)
        target = call.target.decode("latin-1")
        return await self._relay.relay(peer, name, call.method, target, call.headers.items(), body)

    # ---- model endpoints -------------------------------------------------------------------------

    async def _metadata(
        self, call: _Call, name: str, version: str
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        meta = self.dataplane.model_metadata(name, version)
        document = {
            "name": meta.name,
            "versions": meta.versions,
            "platform": meta.platform,
            "inputs": [{"name": t.name, "datatype": t.datatype, "shape": t.shape} for t in meta.inputs],
            "outputs": [{"name": t.name, "datatype": t.datatype, "shape": t.shape} for t in meta.outputs],
        }
        return 200, orjson.dumps(document), [_JSON]

    async def _ready(
        self, call: _Call, name: str, version: str
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        if await self.dataplane.model_readiness(name, version):
            return 200, b"", [_TEXT]
        return 400, error_body("Model version not ready"), [_JSON]

    async def _config(
        self, call: _Call, name: str, version: str
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        return 200, orjson.dumps(self.dataplane.model_config(name, version)), [_JSON]

    async def _stats(
        self, call: _Call, name: str, version: str
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        return 200, await extensions.statistics(self.dataplane, name, version), [_JSON]

    async def _trace_setting(self, call: _Call, model: str) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        if call.method not in ("GET", "POST"):
            return _not_allowed()
        body = await read_body(call.receive, None, self.max_input_size) if call.method == "POST" else None
        return 200, await extensions.trace_setting(self.dataplane, model, body), [_JSON]

    async def _infer(
        self, call: _Call, name: str, version: str
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        headers = call.headers
        call.request_id = ""
        tracer = self.dataplane.tracer
        trace = None
        if tracer.enabled:
            trace = call.trace = tracer.begin(name, "HTTP", extensions.trace_headers(headers))
        length = headers.get(b"content-length")
        try:
            declared = int(length) if length is not None else None
        except ValueError:
            raise InvalidArgumentError("invalid Content-Length header") from None
        header_length = headers.get(b"inference-header-content-length")
        raw = header_length is not None and header_length.strip() == b"0"
        content_encoding = headers.get(b"content-encoding")
        body = await read_body(call.receive, declared, self.max_input_size, raw and content_encoding is None)
        if content_encoding is not None:
            body = decompress(body, content_encoding.decode("latin-1"), self.max_input_size)
        if self.dataplane.loads_on_demand:
            await self.dataplane.admit(name)
        if self.dataplane.is_decoupled(name, version):
            raise UnsupportedError("HTTP end point doesn't support models with decoupled transaction policy")
        if raw:
            signature = self.dataplane.signature(name, version)
            request, binary_output = json_v2.decode_raw_request(body, signature, name, version), True
        else:
            header, binary = json_v2.split_body(
                body, header_length.decode("latin-1") if header_length is not None else None
            )
            try:
                request, binary_output = json_v2.decode_request(
                    header, binary, name, version, self.dataplane.shared_memory
                )
            except RankError as exc:  # more dimensions than an array holds: the model's own shape error
                raise self.dataplane.signature(name, version).refusal(exc) from None
        call.request_id = request.id
        if self.forwarding is not None:
            pairs = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers.items()]
            self.forwarding.apply(request, pairs)
        if trace is not None:
            trace.received(request)
        response = await self._disconnects.run(self.dataplane.infer(request), call.receive)
        if trace is not None:
            trace.answered(response)
        document, chunks = json_v2.encode_response(response, request, binary_output)
        if not chunks:
            body, reply_headers = document, [_JSON]
        else:
            body = b"".join([document, *chunks])  # type: ignore[list-item, unused-ignore]  # arrays are buffers
            reply_headers = [_OCTET, (b"inference-header-content-length", str(len(document)).encode())]
        accept = headers.get(b"accept-encoding")
        encoding = response_encoding(accept.decode("latin-1")) if accept is not None else None
        if encoding is not None:  # as Triton: only a successful inference answer is ever compressed
            body = compress(body, encoding)
            reply_headers.append((b"content-encoding", encoding.encode()))
        return 200, body, reply_headers

    async def _generate(self, call: _Call, name: str, version: str) -> _Reply:
        body = await read_body(call.receive, None, self.max_input_size)
        return 200, await generate.generate(self.dataplane, body, name, version, self.max_input_size), [_JSON]

    async def _generate_stream(self, call: _Call, name: str, version: str) -> _Reply:
        body = await read_body(call.receive, None, self.max_input_size)
        status, events = await generate.generate_stream(
            self.dataplane, body, name, version, call.receive, self.max_input_size
        )
        return status, events, generate.SSE_HEADERS

    _model_routes: dict[str, tuple[str, Callable[..., Awaitable[_Reply]]]] = {
        "": ("GET", _metadata),
        "ready": ("GET", _ready),
        "config": ("GET", _config),
        "infer": ("POST", _infer),
        "generate": ("POST", _generate),
        "generate_stream": ("POST", _generate_stream),
        "stats": ("GET", _stats),
    }

    # ---- shared memory extension -----------------------------------------------------------------

    async def _shared_memory(
        self, call: _Call, extension: str, rest: list[str]
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        async def body() -> bytes:
            return await read_body(call.receive, None, self.max_input_size)

        if extension == "systemsharedmemory":
            answer = await shared_memory.system(self.dataplane, call.method, rest, body)
        else:
            answer = await shared_memory.cuda(self.dataplane, call.method, rest, body)
        return _not_found() if answer is None else answer

    # ---- repository extension --------------------------------------------------------------------

    async def _repository(self, call: _Call, rest: list[str]) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        if rest == ["index"]:
            body = await read_body(call.receive, None, self.max_input_size)
            ready_only = memory = False
            if body.strip():
                try:
                    document = orjson.loads(body)
                except orjson.JSONDecodeError as exc:
                    raise InvalidArgumentError(f"failed to parse the request JSON buffer: {exc}") from None
                ready = document.get("ready", False) if isinstance(document, dict) else None
                if not isinstance(ready, bool):
                    raise InvalidArgumentError("Unable to parse 'ready': expected a boolean")
                ready_only = ready
                # Naiad's extension, asked for: the entries stay Triton's own otherwise (scripts
                # compare them whole, e.g. NVIDIA's L0_storage_S3_local)
                memory = document.get("memory_bytes", False)
                if not isinstance(memory, bool):
                    raise InvalidArgumentError("Unable to parse 'memory_bytes': expected a boolean")
            entries = []
            for entry in await self.dataplane.repository_index(ready_only):
                item: dict[str, Any] = {"name": entry.name}
                if entry.version:
                    item["version"] = entry.version
                if entry.state:
                    item["state"] = entry.state
                if entry.reason:
                    item["reason"] = entry.reason
                if memory and entry.version:
                    item["memory_bytes"] = entry.memory_bytes
                entries.append(item)
            return 200, orjson.dumps(entries), [_JSON]
        if len(rest) == 3 and rest[0] == "models" and rest[2] in ("load", "unload"):
            parameters = _load_parameters(await read_body(call.receive, None, self.max_input_size))
            if rest[2] == "load":
                await self.dataplane.load_model(rest[1], parameters)
            else:
                dependents = parameters.get("unload_dependents", False)
                if not isinstance(dependents, bool):
                    raise InvalidArgumentError("Unable to parse 'unload_dependents': expected a boolean")
                await self.dataplane.unload_model(rest[1], dependents)
            return 200, b"", [_JSON]
        if len(rest) >= 2 and rest[0] not in ("models", "index"):
            raise UnsupportedError("'repository_name' specification is not supported")
        return _not_found()


def _load_parameters(body: bytes) -> dict[str, Any]:
    """The ``parameters`` object of a load/unload body (an empty body means none)."""
    if not body.strip():
        return {}
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"failed to parse the request JSON buffer: {exc}") from None
    parameters = document.get("parameters", {}) if isinstance(document, dict) else None
    if not isinstance(parameters, dict):
        raise InvalidArgumentError("Unable to parse 'parameters': expected a JSON object")
    return parameters


def _segments(raw_path: bytes) -> list[str]:
    """The path's segments; ``[]`` (routed nowhere) for a path with an empty segment, which Triton's
    routes never match: ``/v2/models/m/infer/``, ``//v2/...``, ``/v2//models``."""
    parts = raw_path.split(b"/")
    if parts[0] or b"" in parts[1:]:
        return []
    del parts[0]
    out: list[str] = []
    for part in parts:
        if b"%" in part:
            part = unquote_to_bytes(part)
        try:
            out.append(part.decode("utf-8"))
        except UnicodeDecodeError:
            raise InvalidArgumentError("the request path is not valid UTF-8") from None
    return out


def _not_found() -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    return 404, error_body("Not Found"), [_JSON]


def _not_allowed() -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    return 405, error_body("Method Not Allowed"), [_JSON]


async def _send(
    send: Send,
    status: int,
    body: bytes | AsyncGenerator[bytes, None],
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = list(extra) if extra else [_JSON]
    if not isinstance(body, bytes):  # a stream (generate_stream): each chunk as it comes, uncompressed
        await send({"type": "http.response.start", "status": status, "headers": headers})
        try:
            async for chunk in body:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            await body.aclose()
        await send({"type": "http.response.body", "body": b""})
        return
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
