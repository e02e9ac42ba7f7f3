"""The composition root: repository + data plane + frontends on one event loop, and graceful exit.

Frontends start before models load, so liveness answers during a long start while readiness stays false
until loading is done (Kubernetes probes rely on exactly that split).  SIGTERM/SIGINT stop the listeners,
let in-flight requests finish within ``--exit-timeout-secs``, finalize every model and exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from naiad.backends.gpus import gpu_count
from naiad.dataplane import DataPlane
from naiad.frontends.http.app import HttpFrontend
from naiad.frontends.metrics import MetricsEndpoint
from naiad.repository.manager import ModelRepository, RepositoryUnavailable
from naiad.settings import ServerSettings

log = logging.getLogger("naiad")


class _Server(uvicorn.Server):
    """uvicorn, minus its own signal handling: the app decides when and how to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _uvicorn(app: Any, host: str, port: int, settings: ServerSettings) -> _Server:
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="none",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="info" if settings.log_verbose else "warning",
        timeout_graceful_shutdown=settings.exit_timeout_secs,
        timeout_keep_alive=75,
        backlog=4096,
    )
    return _Server(config)


def configure_logging(verbose: int) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(levelname).1s%(asctime)s.%(msecs)03d %(process)d %(name)s] %(message)s",
        datefmt="%m%d %H:%M:%S",
        stream=sys.stderr,
    )


async def serve(settings: ServerSettings) -> int:
    repository = ModelRepository(
        settings.model_repositories,
        auto_complete=not settings.disable_auto_complete_config,
        gpu_count=gpu_count(),
        load_threads=settings.model_load_thread_count,
        mode=settings.model_control_mode,
        startup_models=settings.load_models,
        poll_secs=settings.repository_poll_secs,
        cache_dir=settings.repository_cache_dir,
    )
    dataplane = DataPlane(repository, strict_readiness=settings.strict_readiness)
    servers: list[_Server] = []
    if settings.allow_http:
        app = HttpFrontend(dataplane, max_input_size=settings.http_max_input_size)
        servers.append(_uvicorn(app, settings.http_address, settings.http_port, settings))
    if settings.allow_metrics:
        servers.append(_uvicorn(MetricsEndpoint(), settings.metrics_address, settings.metrics_port, settings))
    grpc_server = None
    if settings.allow_grpc and importlib.util.find_spec("naiad.frontends.grpc.server") is not None:
        from naiad.frontends.grpc.server import GrpcFrontend

        grpc_server = GrpcFrontend(dataplane, settings)

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
    log.info("stopped")
    return status


def run(settings: ServerSettings) -> int:
    configure_logging(settings.log_verbose)
    try:
        import uvloop

        return uvloop.run(serve(settings))
    except ImportError:
        return asyncio.run(serve(settings))
