"""The gRPC frontend: grpcio's asyncio server on the app's event loop, configured like tritonserver.

Channel options carry Triton's defaults and flag names: message limits of INT32_MAX both ways,
keepalive and HTTP/2 ping policy, optional maximum connection age, and no second server sharing the
port unless ``--reuse-grpc-port`` asks for it (grpcio would otherwise let one silently share it).

The frontend is :data:`LISTENERS` grpc.aio servers on the one port (``SO_REUSEPORT``: the kernel gives
each new connection to one of them), answering with the same servicers.  A grpc.aio server admits its
calls one at a time (it asks grpc core for the next call once the last one came), each admission a
wake-up of the event loop by grpcio's poller thread; several servers admit several calls per wake-up,
so the loop does more per turn and what the calls send on (to the engine, to a model process) goes out
in fewer writes.  Bare servers answering fixed bytes on one core, 16 connections (``benchmarks/scaling``):
1, 2, 4 servers 12,620, 14,105, 16,089 calls/s; with a round trip to another process per call, as a
frontend worker's or a model process's, 10,039, 13,169, 14,396 (1.0, 1.8, 2.7 calls per write), and 4,
8, 16 servers 15,798, 17,854, 18,699.  Since the servers must share the port, whether anything else
listens on it is checked first (:func:`naiad.frontends.ports.check_free`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc

from naiad.dataplane import DataPlane
from naiad.frontends.access.keyring import Keyring
from naiad.frontends.access.policy import AccessPolicy
from naiad.frontends.access.restriction import Restrictions, parse_restrictions
from naiad.frontends.forwarding import HeaderForwarding
from naiad.frontends.grpc.access import HEADER_PREFIX, AccessInterceptor
from naiad.frontends.grpc.health import HealthServicer, health_handler
from naiad.frontends.grpc.relay import GrpcRelay
from naiad.frontends.grpc.servicer import COMPRESSION, InferenceServicer, rpc_handler
from naiad.frontends.ports import check_free
from naiad.frontends.tls import TlsFiles, tls_files
from naiad.settings import ServerSettings

log = logging.getLogger("naiad.grpc")

#: grpc.aio servers sharing the gRPC port (see above): more admit more calls per wake-up of the loop, up
#: to one per connection.  Naiad on one core, ``add_sub`` over 16 connections, 4 / 8 / 16 servers: 7,699 /
#: 8,290 / 8,845 calls/s with the model in the engine, 5,158 / 6,458 / 6,725 in a model process; one
#: connection unchanged.  A server that no connection reaches costs nothing measurable (the process's
#: RSS under 1 MB more for 16 than for 4, no thread, no CPU while idle).  One for a Unix socket, which a
#: second server cannot share.
LISTENERS = 16


def channel_options(settings: ServerSettings) -> list[tuple[str, Any]]:
    """grpcio server options from the ``--grpc-*`` flags (``grpc.so_reuseport`` as the flag says;
    :class:`GrpcFrontend` sets it for its own servers, which share the port)."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", settings.grpc_max_message_size),
        ("grpc.max_send_message_length", settings.grpc_max_message_size),
        ("grpc.keepalive_time_ms", settings.grpc_keepalive_time),
        ("grpc.keepalive_timeout_ms", settings.grpc_keepalive_timeout),
        ("grpc.keepalive_permit_without_calls", int(settings.grpc_keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", settings.grpc_http2_max_pings_without_data),
        (
            "grpc.http2.min_ping_interval_without_data_ms",
            settings.grpc_http2_min_recv_ping_interval_without_data,
        ),
        ("grpc.http2.max_ping_strikes", settings.grpc_http2_max_ping_strikes),
        ("grpc.so_reuseport", int(settings.reuse_grpc_port)),
    ]
    if settings.grpc_max_connection_age is not None:
        options.append(("grpc.max_connection_age_ms", settings.grpc_max_connection_age))
    if settings.grpc_max_connection_age_grace is not None:
        options.append(("grpc.max_connection_age_grace_ms", settings.grpc_max_connection_age_grace))
    return options


def listen_address(address: str, port: int) -> str:
    """``host:port`` as Triton forms it, with IPv6 literals bracketed."""
    if ":" in address and not address.startswith(("[", "unix:")):
        address = f"[{address}]"
    return f"{address}:{port}"


class GrpcFrontend:
    """``GrpcFrontend(dataplane, settings)``; ``await start()``, later ``await stop(grace_seconds)``."""

    def __init__(
        self, dataplane: DataPlane, settings: ServerSettings, keyring: Keyring | None = None
    ) -> None:
        """``keyring``: the bearer keys (``--auth-key-file``), shared with the HTTP frontend."""
        self.address = listen_address(settings.grpc_address, settings.grpc_port)
        self.port = 0
        compression = COMPRESSION[settings.grpc_infer_response_compression_level]
        pattern = settings.grpc_header_forward_pattern
        forwarding = HeaderForwarding(pattern) if pattern else None
        limit = settings.grpc_max_message_size
        relay = None
        if dataplane.peers is not None:
            relay = GrpcRelay(
                [("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit)]
            )
        self._relay = relay
        self._servicer = InferenceServicer(dataplane, compression, forwarding, relay)
        restrictions = Restrictions(
            parse_restrictions(settings.grpc_restricted_protocols, HEADER_PREFIX, "protocol")
        )
        policy = AccessPolicy(restrictions, keyring)
        self._tls = tls_files(
            settings.grpc_use_ssl,
            settings.grpc_use_ssl_mutual,
            settings.grpc_server_cert,
            settings.grpc_server_key,
            settings.grpc_root_cert,
            "--grpc",
        )
        #: Whether anything else may share the port (``--reuse-grpc-port``, frontend workers).
        self._shared = settings.reuse_grpc_port
        count = 1 if self.address.startswith("unix:") else LISTENERS
        options = channel_options(settings)
        if count > 1:
            options = [(key, 1 if key == "grpc.so_reuseport" else value) for key, value in options]
        interceptors = [AccessInterceptor(policy)] if policy.active else None
        handlers = (rpc_handler(self._servicer), health_handler(HealthServicer(dataplane)))
        self._servers: list[grpc.aio.Server] = []
        for _ in range(count):
            server = grpc.aio.server(options=options, interceptors=interceptors)
            server.add_generic_rpc_handlers(handlers)
            self._servers.append(server)

    async def start(self) -> None:
        try:
            if len(self._servers) > 1 and not self._shared:
                host, _, port = self.address.rpartition(":")
                check_free(host, int(port))
            address = self.address
            for server in self._servers:
                if self._tls is None:
                    self.port = server.add_insecure_port(address)
                else:
                    self.port = server.add_secure_port(address, _credentials(self._tls))
                # (a port 0 is chosen by the first; the others share the one it got)
                address = f"{address.rsplit(':', 1)[0]}:{self.port}"
        except RuntimeError as error:
            raise RuntimeError(f"gRPC frontend cannot listen on {self.address}: {error}") from error
        await asyncio.gather(*(server.start() for server in self._servers))
        log.debug("gRPC frontend listening on %s", self.address)

    async def stop(self, grace_seconds: float) -> None:
        """Refuse new calls, end streams, give running calls ``grace_seconds``, then cancel the rest."""
        self._servicer.close()
        await asyncio.gather(*(server.stop(grace_seconds) for server in self._servers))
        if self._relay is not None:
            await self._relay.close()


def _credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """Server TLS credentials; with ``mutual``, clients must present a certificate signed by ``root``."""
    root = files.root.read_bytes() if files.root is not None else None
    return grpc.ssl_server_credentials(
        [(files.key.read_bytes(), files.cert.read_bytes())],
        root_certificates=root,
        require_client_auth=files.mutual,
    )
