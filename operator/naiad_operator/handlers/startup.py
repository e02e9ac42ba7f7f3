"""Operator start and stop: kopf settings, and the shared clients in ``memo``.

kopf keeps its bookkeeping (finalizer, handler progress, last-handled spec) under our own prefix, so a
``kubectl get -o yaml`` shows whose annotations they are and another kopf operator cannot collide.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import kopf

from naiad_operator import GROUP
from naiad_operator.handlers.context import OperatorContext
from naiad_operator.handlers.leadership import Elector, StandbyLiveness
from naiad_operator.k8s.client import Kube, connect
from naiad_operator.k8s.modelserver import ModelServer
from naiad_operator.metrics import Metrics
from naiad_operator.settings import load

FINALIZER = f"{GROUP}/finalizer"


@kopf.on.startup()
async def start(
    settings: kopf.OperatorSettings,
    memo: kopf.Memo,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """Configure kopf and open the clients every handler uses; with leader election, wait for the
    Lease first (kopf starts no watch before its startup handlers return)."""
    ours = load()
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.posting.loggers = False  # Events are posted explicitly, one per load/unload/sync/failure
    settings.execution.max_workers = 8
    metrics = Metrics()
    requests = metrics.api_requests
    kube = Kube(await connect(), ours.field_manager, ours.api_retries, lambda m: requests.labels(m).inc())
    server = ModelServer(ours.server_timeout, ours.load_timeout)
    memo["context"] = OperatorContext(ours, kube, server, metrics=metrics)
    metrics.serve(ours.metrics_port)
    if ours.leader_election:
        elector = Elector(kube, ours)
        logger.info("waiting for Lease %s/%s as %s", elector.namespace, elector.name, elector.me)
        liveness = memo.get("liveness")
        async with StandbyLiveness(liveness if isinstance(liveness, str) else None, elector.name):
            await elector.acquire()
        logger.info("leading as %s", elector.me)
        memo["elector"] = elector
        memo["leading"] = asyncio.create_task(_lead(elector, logger))


async def _lead(elector: Elector, logger: logging.Logger | logging.LoggerAdapter[Any]) -> None:
    await elector.keep()
    logger.error(
        "lost the Lease %s/%s: exiting so that only the new leader acts", elector.namespace, elector.name
    )
    os._exit(1)


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's own credential readers (service account, then ``$KUBECONFIG``), read when the operator
    starts: the client library's automatic login reads ``$KUBECONFIG`` once, at import time."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    leading, elector = memo.get("leading"), memo.get("elector")
    if isinstance(leading, asyncio.Task) and isinstance(elector, Elector):
        leading.cancel()
        await elector.release()
    context = memo.get("context")
    if isinstance(context, OperatorContext):
        await context.close()


def context_of(memo: kopf.Memo) -> OperatorContext:
    context = memo["context"]
    assert isinstance(context, OperatorContext)
    return context
