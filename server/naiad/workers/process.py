"""The frontend worker's process: read the engine's :class:`Welcome`, serve, drain, exit.

The worker dies with the engine: ``PR_SET_PDEATHSIG`` has the kernel kill it if the engine goes, and
the end of its channel makes it exit (status 1) if the engine closed it.  SIGTERM or SIGINT drains
it: no new connections, in-flight requests finish (the engine still serves them), then status 0.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import msgspec

from naiad import log_settings
from naiad.core.allocator import pin_thresholds
from naiad.core.shm import SharedMemoryRegistry
from naiad.frontends.access.keyring import Keyring
from naiad.frontends.listeners import Listeners
from naiad.ipc.arena import Arena
from naiad.ipc.channel import connect, read_frame
from naiad.ipc.messages import Serving, ToWorker, Welcome
from naiad.settings import ServerSettings
from naiad.tracing.config import parse_trace_config
from naiad.workers.remote import CatalogCopy, EngineLink, RemoteDataPlane
from naiad.workers.tracer import WorkerTracer

log = logging.getLogger("naiad.worker")

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the end of the channel still stops the worker
        pass


def _path(kind: type, value: Any) -> Any:
    """msgspec's decode hook for the settings: ``Path`` is their one type msgspec does not build itself;
    NotImplementedError is how a hook tells msgspec it has no conversion for a type."""
    if kind is Path:
        return Path(value)
    raise NotImplementedError(kind)


def decode_settings(data: bytes) -> ServerSettings:
    return msgspec.json.decode(data, type=ServerSettings, dec_hook=_path)


def main(argv: list[str]) -> int:
    channel_fd, request_fd, response_fd = (int(arg) for arg in argv)
    _die_with_parent()
    sock = socket.socket(fileno=channel_fd)
    try:
        welcome: Welcome = read_frame(sock, Welcome)
    except ConnectionError:
        return 1
    settings = decode_settings(welcome.settings)
    log_settings.configure_server(settings)
    pin_thresholds()
    requests = Arena(request_fd, welcome.arena_size, writable=True)
    # (its size: the engine's part for reserved blocks is past ``arena_size``)
    responses = Arena(response_fd, os.fstat(response_fd).st_size, writable=False)
    import uvloop

    return int(uvloop.run(_serve(welcome.index, settings, sock, requests, responses)))


async def _serve(
    index: int, settings: ServerSettings, sock: socket.socket, requests: Arena, responses: Arena
) -> int:
    tracer = WorkerTracer(parse_trace_config(settings.trace_config), lambda message: link.send(message))
    shared_memory = SharedMemoryRegistry(settings.allow_client_shm)
    link = EngineLink(requests, responses, CatalogCopy(), shared_memory, tracer)
    dataplane = RemoteDataPlane(link, settings)
    sock.setblocking(False)
    await connect(sock, ToWorker, link.on_message, link.on_lost, link.bind)
    keyring = Keyring(settings.auth_key_file) if settings.auth_key_file is not None else None
    listeners = Listeners(dataplane, settings, keyring, reuse_port=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if not await listeners.start():  # (said in the log)
        await listeners.stop(0)
        return 1
    link.send(Serving())
    lost = asyncio.create_task(link.lost.wait())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({lost, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if link.lost.is_set():
        log.error("frontend worker %d: the engine is gone; exiting", index)
        dataplane.exiting = True
        await listeners.stop(0)
        return 1
    deadline = time.monotonic() + settings.exit_timeout_secs
    dataplane.exiting = True
    await listeners.stop(settings.exit_timeout_secs)
    await dataplane.drain(max(0.0, deadline - time.monotonic()))
    shared_memory.close()
    tracer.close()
    return 0
