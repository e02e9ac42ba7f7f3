"""Naiad, a Triton-compatible inference server.

gRPC's socket polling is chosen here because grpc core reads ``GRPC_EXPERIMENTS`` once, when ``grpc`` is
first imported, and this module runs before any of Naiad's own modules import it.  With its defaults,
grpc core reads and writes sockets on its EventEngine threads, so one unary call in ``grpc.aio`` hops
between those threads, the completion-queue poller thread and the event loop: about 17 context switches
per call measured on one core (``perf stat``), the larger part of what a call costs there.  With the
EventEngine listener and endpoints off, the thread that waits on the completion queue polls the sockets
itself (grpc's epoll poller) and the EventEngine threads stay idle: a bare ``grpc.aio`` server pinned to
one core answered 4,182 instead of 3,627 calls per second (benchmarks/scaling/README.md, sixth session).
A ``GRPC_EXPERIMENTS`` set in the environment is left as it is.
"""

from __future__ import annotations

import os

#: grpc core experiments turned off unless the environment chooses its own.
GRPC_EXPERIMENTS = "-event_engine_listener,-event_engine_for_all_other_endpoints"

os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS)
