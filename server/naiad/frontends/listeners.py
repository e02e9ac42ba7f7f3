"""The client-facing listeners of one process: HTTP, gRPC and OpenAI over one data plane.

The single-process server builds them over its :class:`~naiad.dataplane.DataPlane`; each frontend
worker builds the same set over its remote data plane, with ``reuse_port`` so that N workers share
the configured ports (``SO_REUSEPORT``: the kernel spreads new connections over them).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import logging
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import uvicorn

from naiad.dataplane import DataPlane
from naiad.frontends.access.keyring import Keyring
from naiad.frontends.access.policy import AccessPolicy
from naiad.frontends.access.restriction import Restrictions, parse_restrictions
from naiad.frontends.forwarding import HeaderForwarding
from naiad.frontends.http.app import HttpFrontend
from naiad.frontends.http.protocol import HttpProtocol
from naiad.frontends.tls import TlsFiles, tls_files
from naiad.settings import ServerSettings

log = logging.getLogger("naiad")


class UvicornServer(uvicorn.Server):
    """uvicorn, minus its own signal handling: the app decides when and how to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def uvicorn_server(
    app: Any, host: str, port: int, settings: ServerSettings, tls: TlsFiles | None = None
) -> UvicornServer:
    """A uvicorn server for ``app``; HTTPS with ``tls`` (client certificates required when mutual)."""
    secure: dict[str, Any] = {}
    if tls is not None:
        secure = {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}
        if tls.root is not None:
            secure["ssl_ca_certs"] = str(tls.root)
        if tls.mutual:
            secure["ssl_cert_reqs"] = ssl.CERT_REQUIRED
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="none",
        http=HttpProtocol,  # httptools, one write per response
        lifespan="off",
        access_log=False,
        # its warnings and errors go through the server's own handler and format; its start and stop
        # lines ("Uvicorn running on ...") are not a Triton server's (the app logs tritonserver's)
        log_level="warning",
        log_config=None,
        timeout_graceful_shutdown=settings.exit_timeout_secs,
        timeout_keep_alive=75,
        backlog=4096,
        # X-Forwarded-* rewriting and a "server: uvicorn" header cost per request and are not
        # Triton's behaviour; clients see the peer address they connect from, as with tritonserver.
        proxy_headers=False,
        server_header=False,
        **secure,
    )
    return UvicornServer(config)


async def _serve(server: UvicornServer, sockets: list[socket.socket] | None) -> None:
    """``server.serve``, ending (the task done) rather than raising ``SystemExit`` when it cannot start:
    uvicorn exits that way on a port taken, which would leave the event loop at once, past the
    server's shutdown (the gRPC servers then freed on a closed loop)."""
    with contextlib.suppress(SystemExit):
        await server.serve(sockets=sockets)


def _shared_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` that other workers may bind too (``SO_REUSEPORT``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(4096)
    sock.set_inheritable(False)
    return sock


class Listeners:
    """HTTP (``--allow-http``), gRPC (``--allow-grpc``) and OpenAI (``--openai-port``) listeners."""

    def __init__(
        self, dataplane: DataPlane, settings: ServerSettings, keyring: Keyring | None, *, reuse_port: bool
    ) -> None:
        #: Each uvicorn server, where it listens, and whether its port is shared (``SO_REUSEPORT``).
        self._servers: list[tuple[UvicornServer, str, int, bool]] = []
        self._http: HttpFrontend | None = None
        self._keyring = keyring
        restrictions = Restrictions(parse_restrictions(settings.http_restricted_apis))
        if settings.allow_http:
            pattern = settings.http_header_forward_pattern
            app = HttpFrontend(
                dataplane,
                max_input_size=settings.http_max_input_size,
                access=AccessPolicy(restrictions, keyring),
                forwarding=HeaderForwarding(pattern) if pattern else None,
            )
            self._http = app
            tls = tls_files(
                settings.http_use_ssl,
                settings.http_use_ssl_mutual,
                settings.http_server_cert,
                settings.http_server_key,
                settings.http_root_cert,
                "--http",
            )
            server = uvicorn_server(app, settings.http_address, settings.http_port, settings, tls)
            shared = reuse_port or settings.reuse_http_port
            self._servers.append((server, settings.http_address, settings.http_port, shared))
        if settings.openai_port is not None:
            # imported only when served: it brings pydantic, a tenth of a second of every start-up
            from naiad.frontends.openai.app import OpenAIFrontend

            openai = OpenAIFrontend(
                dataplane,
                max_input_size=settings.http_max_input_size,
                access=AccessPolicy(restrictions, keyring),
            )
            server = uvicorn_server(openai, settings.openai_address, settings.openai_port, settings)
            self._servers.append((server, settings.openai_address, settings.openai_port, reuse_port))
            log.info("serving the OpenAI API on %s:%d", settings.openai_address, settings.openai_port)
        self._grpc: Any = None
        if settings.allow_grpc and importlib.util.find_spec("naiad.frontends.grpc.server") is not None:
            from naiad.frontends.grpc.server import GrpcFrontend

            if reuse_port:
                settings = dataclasses.replace(settings, reuse_grpc_port=True)
            self._grpc = GrpcFrontend(dataplane, settings, keyring)
        self._tasks: list[asyncio.Task[None]] = []
        self._watch: asyncio.Task[None] | None = None

    def add(self, server: UvicornServer) -> None:
        """Another uvicorn server started and stopped with these (the engine's metrics endpoint)."""
        self._servers.append((server, "", 0, False))

    async def start(self) -> bool:
        """Start listening; ``False`` when a listener could not (its port taken), said in the log."""
        try:
            for server, host, port, shared in self._servers:
                sockets = [_shared_socket(host, port)] if shared and host else None
                self._tasks.append(asyncio.create_task(_serve(server, sockets)))
        except OSError as error:
            log.error("a frontend failed to start: %s", error)
            return False
        if self._grpc is not None:
            try:
                await self._grpc.start()
            except RuntimeError as error:  # (its port taken: the caller stops what did start)
                log.error("%s", error)
                return False
        if self._keyring is not None:
            self._watch = asyncio.create_task(self._keyring.watch())
        for (server, _, _, _), task in zip(self._servers, self._tasks, strict=True):
            while not server.started and not task.done():
                await asyncio.sleep(0.01)
        if any(task.done() for task in self._tasks):
            log.error("a frontend failed to start (is its port free?)")
            return False
        return True

    async def stop(self, grace: float) -> None:
        """Stop accepting; let calls in flight finish within ``grace`` seconds (also after a failed
        ``start``: what started stops)."""
        if self._watch is not None:
            self._watch.cancel()
        for server, _, _, _ in self._servers:
            server.should_exit = True
        if self._grpc is not None:
            await self._grpc.stop(grace)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
