"""The gRPC frontend: grpcio's asyncio server on the app's event loop, configured like tritonserver.

Channel options carry Triton's defaults and flag names: message limits of INT32_MAX both ways,
keepalive and HTTP/2 ping policy, optional maximum connection age, and no SO_REUSEPORT unless
``--reuse-grpc-port`` asks for it (grpcio would otherwise let a second server silently share the port).
"""

from __future__ import annotations

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
from naiad.frontends.tls import TlsFiles, tls_files
from naiad.settings import ServerSettings

log = logging.getLogger("naiad.grpc")


def channel_options(settings: ServerSettings) -> list[tuple[str, Any]]:
    """grpcio server options from the ``--grpc-*`` flags."""
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
        restrictions = Restrictions(parse_restrictions(settings.grpc_restricted_protocols, HEADER_PREFIX))
        policy = AccessPolicy(restrictions, keyring)
        self._tls = tls_files(
            settings.grpc_use_ssl,
            settings.grpc_use_ssl_mutual,
            settings.grpc_server_cert,
            settings.grpc_server_key,
            settings.grpc_root_cert,
            "--grpc",
        )
        self._server = grpc.aio.server(
            options=channel_options(settings),
            interceptors=[AccessInterceptor(policy)] if policy.active else None,
        )
        self._server.add_generic_rpc_handlers(
            (rpc_handler(self._servicer), health_handler(HealthServicer(dataplane)))
        )

    async def start(self) -> None:
        try:
            if self._tls is None:
                self.port = self._server.add_insecure_port(self.address)
            else:
                self.port = self._server.add_secure_port(self.address, _credentials(self._tls))
        except RuntimeError as error:
            raise RuntimeError(f"gRPC frontend cannot listen on {self.address}: {error}") from error
        await self._server.start()
        log.info("gRPC frontend listening on %s", self.address)

    async def stop(self, grace_seconds: float) -> None:
        """Refuse new calls, end streams, give running calls ``grace_seconds``, then cancel the rest."""
        self._servicer.close()
        await self._server.stop(grace_seconds)
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
