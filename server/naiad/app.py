"""The composition root: repository + data plane + frontends on one event loop, and graceful exit.

Frontends start before models load, so liveness answers during a long start while readiness stays false
until loading is done (Kubernetes probes rely on exactly that split).  SIGTERM/SIGINT stop the listeners,
let in-flight requests finish within ``--exit-timeout-secs``, finalize every model and exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import logging
import signal
import ssl
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from naiad import log_settings
from naiad.backends.gpus import gpu_count
from naiad.core.allocator import pin_thresholds
from naiad.core.shm import SharedMemoryRegistry
from naiad.dataplane import DataPlane
from naiad.frontends.access.keyring import Keyring
from naiad.frontends.access.policy import AccessPolicy
from naiad.frontends.access.restriction import Restrictions, parse_restrictions
from naiad.frontends.forwarding import HeaderForwarding
from naiad.frontends.http.app import HttpFrontend
from naiad.frontends.metrics import MetricsEndpoint
from naiad.frontends.openai.app import OpenAIFrontend
from naiad.frontends.tls import TlsFiles, tls_files
from naiad.log_settings import LogSettings
from naiad.metrics.registry import ServerMetrics
from naiad.repository.manager import ModelRepository, RepositoryUnavailable
from naiad.scheduling.cache import ResponseCache, parse_cache_config
from naiad.scheduling.rate_limiter import RateLimiter, install, parse_resource
from naiad.settings import ServerSettings
from naiad.tracing.config import parse_trace_config
from naiad.tracing.tracer import Tracer

log = logging.getLogger("naiad")


class _Server(uvicorn.Server):
    """uvicorn, minus its own signal handling: the app decides when and how to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _uvicorn(
    app: Any, host: str, port: int, settings: ServerSettings, tls: TlsFiles | None = None
) -> _Server:
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
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="info" if settings.log_verbose else "warning",
        log_config=None,  # uvicorn's records go through the server's own handler and format
        timeout_graceful_shutdown=settings.exit_timeout_secs,
        timeout_keep_alive=75,
        backlog=4096,
        # X-Forwarded-* rewriting and a "server: uvicorn" header cost per request and are not
        # Triton's behaviour; clients see the peer address they connect from, as with tritonserver.
        proxy_headers=False,
        server_header=False,
        **secure,
    )
    return _Server(config)


def configure_logging(settings: ServerSettings) -> None:
    """Triton's log lines and the ``--log-*`` settings, changeable later through the logging extension."""
    log_file = str(settings.log_file) if settings.log_file else ""
    log_settings.configure(
        LogSettings(
            log_file,
            settings.log_info,
            settings.log_warning,
            settings.log_error,
            settings.log_verbose,
            settings.log_format,
        )
    )


async def serve(settings: ServerSettings) -> int:
    cache_size = parse_cache_config(settings.cache_config)
    response_cache = ResponseCache(cache_size) if cache_size is not None else None
    repository = ModelRepository(
        settings.model_repositories,
        auto_complete=not settings.disable_auto_complete_config,
        gpu_count=gpu_count(),
        load_threads=settings.model_load_thread_count,
        mode=settings.model_control_mode,
        startup_models=settings.load_models,
        poll_secs=settings.repository_poll_secs,
        cache_dir=settings.repository_cache_dir,
        response_cache=response_cache,
    )
    tracer = Tracer(parse_trace_config(settings.trace_config))
    resources = [parse_resource(text) for text in settings.rate_limit_resources]
    install(RateLimiter(resources) if settings.rate_limit == "execution_count" else None)
    shared_memory = SharedMemoryRegistry(settings.allow_client_shm)
    dataplane = DataPlane(
        repository,
        strict_readiness=settings.strict_readiness,
        tracer=tracer,
        shared_memory=shared_memory,
        response_cache=response_cache,
    )
    keyring = Keyring(settings.auth_key_file) if settings.auth_key_file is not None else None
    servers: list[_Server] = []
    metrics: ServerMetrics | None = None
    if settings.allow_http:
        pattern = settings.http_header_forward_pattern
        app = HttpFrontend(
            dataplane,
            max_input_size=settings.http_max_input_size,
            access=AccessPolicy(Restrictions(parse_restrictions(settings.http_restricted_apis)), keyring),
            forwarding=HeaderForwarding(pattern) if pattern else None,
        )
        tls = tls_files(
            settings.http_use_ssl,
            settings.http_use_ssl_mutual,
            settings.http_server_cert,
            settings.http_server_key,
            settings.http_root_cert,
            "--http",
        )
        servers.append(_uvicorn(app, settings.http_address, settings.http_port, settings, tls))
    if settings.allow_metrics:
        metrics = ServerMetrics(repository, settings)
        metrics.start()
        endpoint = MetricsEndpoint(metrics)
        servers.append(_uvicorn(endpoint, settings.metrics_address, settings.metrics_port, settings))
    if settings.openai_port is not None:
        openai = OpenAIFrontend(
            dataplane,
            max_input_size=settings.http_max_input_size,
            access=AccessPolicy(Restrictions(parse_restrictions(settings.http_restricted_apis)), keyring),
        )
        servers.append(_uvicorn(openai, settings.openai_address, settings.openai_port, settings))
        log.info("serving the OpenAI API on %s:%d", settings.openai_address, settings.openai_port)
    grpc_server = None
    if settings.allow_grpc and importlib.util.find_spec("naiad.frontends.grpc.server") is not None:
        from naiad.frontends.grpc.server import GrpcFrontend

        grpc_server = GrpcFrontend(dataplane, settings, keyring)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    tasks = [asyncio.create_task(s.serve()) for s in servers]
    if grpc_server is not None:
        await grpc_server.start()
    for server in servers:
        while not server.started and not tasks[servers.index(server)].done():
            await asyncio.sleep(0.01)
    for task in tasks:
        if task.done() and task.exception() is None and not stop.is_set():
            log.error("a frontend failed to start (is its port free?)")
            stop.set()
    log.info(
        "serving HTTP on %s:%d, gRPC on %s:%d, metrics on %s:%d",
        settings.http_address,
        settings.http_port,
        settings.grpc_address,
        settings.grpc_port,
        settings.metrics_address,
        settings.metrics_port,
    )
    loader = asyncio.create_task(repository.start())
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait({loader, waiter}, return_when=asyncio.FIRST_COMPLETED)
    status = 0
    if loader.done() and isinstance(loader.exception(), RepositoryUnavailable):
        log.error("%s", loader.exception())
        status = 1
        stop.set()
    elif loader.done():
        loader.result()
        dataplane.started = True
        # What is loaded by now lives as long as the server: keep it out of the collector's full
        # passes, whose pauses over the whole heap (tens of ms) made the p99 of small models.
        gc.freeze()
        log.info("models loaded; ready=%s", dataplane.ready())
    await stop.wait()

    deadline = time.monotonic() + settings.exit_timeout_secs
    log.info("exit requested: draining in-flight requests (up to %ds)", settings.exit_timeout_secs)
    dataplane.exiting = True
    for server in servers:
        server.should_exit = True
    if grpc_server is not None:
        await grpc_server.stop(max(0.0, deadline - time.monotonic()))
    await asyncio.gather(*tasks, return_exceptions=True)
    await dataplane.drain(max(0.0, deadline - time.monotonic()))
    if not loader.done():
        loader.cancel()
        await asyncio.gather(loader, return_exceptions=True)
    await repository.close()
    shared_memory.close()
    tracer.close()
    if metrics is not None:
        metrics.stop()
    log.info("stopped")
    return status


def run(settings: ServerSettings) -> int:
    configure_logging(settings)
    pin_thresholds()  # tensor-sized blocks stay in the heap between requests (see naiad.core.allocator)
    try:
        import uvloop

        return uvloop.run(serve(settings))
    except ImportError:
        return asyncio.run(serve(settings))
