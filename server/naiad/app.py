"""The composition root: the engine (runtime, model registry, repository manager, data plane), its frontends,
and graceful exit.

With ``--frontend-workers 0`` the frontends run in this process over the data plane.  With N > 0 this
process is the engine alone (plus ``/metrics``) and N worker processes serve HTTP and gRPC on the same
ports (see docs/architecture.md and :mod:`naiad.engine.workers`).

Frontends start before models load, so liveness answers during a long start while readiness stays false
until loading is done (Kubernetes probes rely on exactly that split).  SIGTERM/SIGINT stop the listeners,
let in-flight requests finish within ``--exit-timeout-secs``, finalize every model and exit 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import signal
import time

from naiad import log_settings, triton_flags
from naiad.backends.gpus import gpu_count
from naiad.backends.runtime import Runtime
from naiad.backends.settings import BackendSettings
from naiad.core.allocator import pin_thresholds
from naiad.core.cpu_policy import apply_cpu_policy
from naiad.core.shm import SharedMemoryRegistry
from naiad.dataplane import EXTENSIONS, SERVER_VERSION, BlsServer, DataPlane
from naiad.engine.workers import FrontendWorkers
from naiad.frontends.access.keyring import Keyring
from naiad.frontends.listeners import Listeners, uvicorn_server
from naiad.frontends.metrics import MetricsEndpoint
from naiad.frontends.ports import check_free
from naiad.metrics.registry import ServerMetrics
from naiad.repository.manager import ModelRepository, RepositoryUnavailable
from naiad.repository.peers import Peers
from naiad.repository.registry import ModelRegistry
from naiad.repository.residency import Residency
from naiad.repository.summary import OPTIONS_HEADER, model_rows, table
from naiad.scheduling.cache import CacheUnavailable, open_cache, parse_cache_config
from naiad.scheduling.rate_limiter import RateLimiter, parse_resource
from naiad.scheduling.start_delay import StartDelay
from naiad.settings import ServerSettings
from naiad.tracing.config import parse_trace_config
from naiad.tracing.tracer import Tracer

log = logging.getLogger("naiad")


def configure_logging(settings: ServerSettings) -> None:
    """Triton's log lines and the ``--log-*`` settings, changeable later through the logging extension."""
    log_settings.configure_server(settings)


async def serve(settings: ServerSettings) -> int:
    triton_flags.log_inert(settings.inert_flags)
    try:  # (a Redis cache answers before anything else starts, as in Triton)
        response_cache = await open_cache(parse_cache_config(settings.cache_config))
    except CacheUnavailable as error:
        log.error("creating server: Internal - %s", error)
        return 1
    resources = [parse_resource(text) for text in settings.rate_limit_resources]
    rate_limiter = RateLimiter(resources) if settings.rate_limit == "execution_count" else None
    registry = ModelRegistry()
    # Models come and go while the server serves (on-demand loads, evictions): ONNX sessions then
    # share the process-wide thread pools, as a session with pools of its own blocks the event
    # loop while it is destroyed (naiad.backends.onnxruntime.session).
    runtime = Runtime(
        shared_onnx_threads=bool(settings.load_on_demand)
        or settings.model_memory_budget is not None
        or settings.model_gpu_memory_budget is not None,
        backend_directory=settings.backend_directory,
        settings=BackendSettings(
            settings.backend_config,
            auto_complete=not settings.disable_auto_complete_config,
            backend_directory=settings.backend_directory,
        ),
    )
    repository = ModelRepository(
        settings.model_repositories,
        registry=registry,
        runtime=runtime,
        auto_complete=not settings.disable_auto_complete_config,
        gpu_count=gpu_count(),
        load_threads=settings.model_load_thread_count,
        mode=settings.model_control_mode,
        startup_models=settings.load_models,
        poll_secs=settings.repository_poll_secs,
        namespacing=settings.model_namespacing,
        config_name=settings.model_config_name,
        load_retries=settings.model_load_retry_count,
        gpu_limits=settings.model_load_gpu_limit,
        cache_dir=settings.repository_cache_dir,
        response_cache=response_cache,
        rate_limiter=rate_limiter,
        start_delay=StartDelay.from_environ(os.environ),
        residency=Residency(
            settings.load_on_demand,
            budget=settings.model_memory_budget,
            gpu_budget=settings.model_gpu_memory_budget,
            load_timeout=settings.on_demand_load_timeout_secs,
            min_residency=settings.min_residency_secs,
            policy=settings.eviction_policy,
        ),
    )
    tracer = Tracer(parse_trace_config(settings.trace_config))
    shared_memory = SharedMemoryRegistry(settings.allow_client_shm)
    peers = Peers(settings.peers_file)
    dataplane = DataPlane(
        registry,
        repository,
        strict_readiness=settings.strict_readiness,
        tracer=tracer,
        shared_memory=shared_memory,
        response_cache=response_cache,
        peers=peers,
        server_id=settings.server_id,
    )
    loop = asyncio.get_running_loop()
    runtime.bls = BlsServer(dataplane, loop)
    runtime.in_flight = dataplane.in_flight
    workers: FrontendWorkers | None = None
    if settings.frontend_workers > 0:
        # The engine serves only /metrics; the workers build their own listeners (each process its own)
        # and their own keyrings: the key file is watched where calls are checked.
        listeners = Listeners(dataplane, _metrics_only(settings), None, reuse_port=False)
        workers = FrontendWorkers(settings.frontend_workers, settings, dataplane, runtime.arenas)
    else:
        keyring = Keyring(settings.auth_key_file) if settings.auth_key_file is not None else None
        listeners = Listeners(dataplane, settings, keyring, reuse_port=False)
    metrics: ServerMetrics | None = None
    if settings.allow_metrics:
        metrics = ServerMetrics(repository, settings, peers)
        metrics.start()
        endpoint = MetricsEndpoint(metrics)
        listeners.add(uvicorn_server(endpoint, settings.metrics_address, settings.metrics_port, settings))

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    started = await listeners.start()
    if started and workers is not None:
        started = _client_ports_free(settings)
    if not started:  # (a port taken: said in the log; what did start stops below, exit status 1)
        stop.set()
    else:
        if workers is not None:
            await workers.start()
            log.info("serving through %d frontend workers", settings.frontend_workers)
        # tritonserver's words, which users and their tooling wait for in the log
        if settings.allow_grpc:
            log.info("Started GRPCInferenceService at %s:%d", settings.grpc_address, settings.grpc_port)
        if settings.allow_http:
            log.info("Started HTTPService at %s:%d", settings.http_address, settings.http_port)
        if settings.allow_metrics:
            log.info("Started Metrics Service at %s:%d", settings.metrics_address, settings.metrics_port)
    status = 0 if started else 1
    # (nothing is loaded for a server that could not listen: it exits at once)
    loader = asyncio.create_task(repository.start()) if started else None
    if loader is not None:
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait({loader, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if loader.done() and isinstance(loader.exception(), RepositoryUnavailable):
            log.error("%s", loader.exception())
            status = 1
            stop.set()
        elif loader.done():
            complete = loader.result()
            log.info("\n%s\n", table(model_rows(repository.index())), extra={"verbatim": True})
            log.info("\n%s\n", table(option_rows(settings), OPTIONS_HEADER), extra={"verbatim": True})
            if not complete and settings.exit_on_error:
                log.error("creating server: Internal - failed to load all models")  # (Triton's words)
                status = 1
                stop.set()
            else:
                dataplane.started = True
                # What is loaded by now lives as long as the server: keep it out of the collector's full
                # passes, whose pauses over the whole heap (tens of ms) made the p99 of small models.
                gc.freeze()
                log.info("models loaded; ready=%s", dataplane.ready())
    await stop.wait()

    deadline = time.monotonic() + settings.exit_timeout_secs
    log.info("Waiting for in-flight requests to complete.")
    if workers is not None:
        # The workers drain first: the engine keeps serving what they forward until they are gone.
        await workers.stop(deadline)
    dataplane.exiting = True
    await listeners.stop(max(0.0, deadline - time.monotonic()))
    await dataplane.drain(max(0.0, deadline - time.monotonic()))
    if loader is not None and not loader.done():
        loader.cancel()
        await asyncio.gather(loader, return_exceptions=True)
    log.info("All models are stopped, unloading models")
    await repository.close()
    if response_cache is not None:
        await response_cache.close()
    runtime.close()
    shared_memory.close()
    tracer.close()
    if metrics is not None:
        metrics.stop()
    log.info("stopped")
    return status


def option_rows(settings: ServerSettings) -> list[tuple[str, str]]:
    """tritonserver's options table, the rows Naiad has a setting for (no pinned or CUDA memory
    pools, no compute capability), in its order and words; then Naiad's frontend workers."""
    rows = [
        ("server_id", settings.server_id),
        ("server_version", SERVER_VERSION),
        ("server_extensions", " ".join(EXTENSIONS)),
    ]
    rows += [(f"model_repository_path[{i}]", path) for i, path in enumerate(settings.model_repositories)]
    rows.append(("model_control_mode", f"MODE_{settings.model_control_mode.name}"))
    rows += [(f"startup_models_{i}", name) for i, name in enumerate(settings.load_models)]
    rows += [
        ("strict_model_config", str(int(settings.disable_auto_complete_config))),
        ("model_config_name", settings.model_config_name),
        ("rate_limit", "EXEC_COUNT" if settings.rate_limit == "execution_count" else "OFF"),
        ("strict_readiness", str(int(settings.strict_readiness))),
        ("exit_timeout", str(settings.exit_timeout_secs)),
        ("cache_enabled", str(int(bool(settings.cache_config)))),
        ("frontend_workers", str(settings.frontend_workers)),
    ]
    return rows


def _client_ports_free(settings: ServerSettings) -> bool:
    """Whether the ports frontend workers will share (``SO_REUSEPORT``) are free of other listeners,
    checked once here: a worker that found its port taken would fail after it started, and be
    started again, for ever; the server says so and exits instead, as Triton does."""
    ports = []
    if settings.allow_http and not settings.reuse_http_port:
        ports.append(("HTTP", settings.http_address, settings.http_port))
    if settings.allow_grpc and not settings.reuse_grpc_port:
        ports.append(("gRPC", settings.grpc_address, settings.grpc_port))
    if settings.openai_port is not None:
        ports.append(("OpenAI", settings.openai_address, settings.openai_port))
    for name, host, port in ports:
        try:
            check_free(host, port)
        except RuntimeError as error:
            log.error("%s frontend cannot listen on %s:%d: %s", name, host, port, error)
            return False
    return True


def _metrics_only(settings: ServerSettings) -> ServerSettings:
    """The engine's own listeners in worker mode: none but the metrics endpoint added to them."""
    return dataclasses.replace(settings, allow_http=False, allow_grpc=False, openai_port=None)


def run(settings: ServerSettings) -> int:
    configure_logging(settings)
    # Before any thread is started here: they, the frontend workers and the model processes inherit it.
    apply_cpu_policy(settings.cpu_policy)
    pin_thresholds()  # tensor-sized blocks stay in the heap between requests (see naiad.core.allocator)
    try:
        import uvloop

        return uvloop.run(serve(settings))
    except ImportError:
        return asyncio.run(serve(settings))
