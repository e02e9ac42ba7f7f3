"""The contract between the scheduler and a framework backend.

Modelled on Triton's python_backend: an instance receives a list of requests and returns one result per
request, in order; a per-request error fails only that request.  ``execute`` is synchronous and is
always called on the instance's own thread (or process), never on the event loop, so a backend may
block, and frameworks that release the GIL (ONNX Runtime, torch) run instances truly in parallel.

Decoupled models (``model_transaction_policy { decoupled: true }``) answer each request 0..N times,
during ``execute`` or later from any thread, through the request's ``responses`` sink, ending with
the final flag.  Their ``execute`` still returns one result per request, but for such a request it only
says how the execution went: an error (nothing was, or will be, sent) or an empty
:class:`~naiad.core.request.InferResponse` (the sink carries the answers).  So the scheduler path is
the same for both kinds, and the non-decoupled fast path pays nothing for streaming.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from naiad.core.errors import InferenceServerError, InternalError
from naiad.core.request import InferRequest, InferResponse
from naiad.core.signature import ModelSignature

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

ExecuteResult = InferResponse | InferenceServerError

#: Triton's message when a request is released for rescheduling to a model whose scheduler cannot
#: take it back (Triton logs it and never answers the request; Naiad answers it with this error).
NOT_RESCHEDULABLE = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)


class Rescheduled(InternalError):
    """The result of a request the model released with ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``:
    it is not answered yet and must run again in a later batch (Triton's iterative sequences).

    An error, so that every scheduler but the one that can take a request back (the sequence batcher
    with ``iterative_sequence``) fails the request with Triton's message instead of losing it.
    """

    def __init__(self) -> None:
        super().__init__(NOT_RESCHEDULABLE)


@dataclass(frozen=True, slots=True)
class InstanceContext:
    """Everything one model instance needs to load.

    ``config`` is the normalized ``ModelConfig`` protobuf; ``kind`` is ``CPU``, ``GPU`` or ``MODEL``
    (Triton's ``model_instance_kind`` strings).
    """

    model_name: str
    model_version: int
    model_dir: Path
    version_dir: Path
    model_file: Path
    config: mc.ModelConfig
    signature: ModelSignature
    instance_name: str
    kind: str
    device_id: int
    #: Where an instance whose model runs in a process of its own reports that process's failures.
    health: InstanceHealth | None = field(default=None, compare=False)


class InstanceHealth:
    """What the instances of one model version report about the processes that run their model.

    An instance counts each unexpected end of a model process (``exits``, by cause, for metrics) and
    calls :meth:`fail` when it gives up restarting it; the repository sets ``on_failure`` once the
    version exists, to make the version UNAVAILABLE with the reason.  Called from instance threads.
    """

    def __init__(self) -> None:
        self.exits: dict[str, int] = {}
        self.failure = ""
        self.on_failure: Callable[[str], None] | None = None

    def exited(self, cause: str) -> None:
        self.exits[cause] = self.exits.get(cause, 0) + 1

    def fail(self, reason: str) -> None:
        self.failure = reason
        if self.on_failure is not None:
            self.on_failure(reason)


class ModelInstance(Protocol):
    """One loaded copy of a model version."""

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        """Run ``requests`` together; return exactly one result per request, in order.

        Each response carries every output the model produced (or the subset the request asked for);
        the data plane orders and filters them for the client.
        """
        ...

    def close(self) -> None:
        """Release the instance (``finalize()`` for Python models); called once, on unload."""
        ...


class Backend(Protocol):
    """A framework: completes configs and creates instances."""

    name: str

    def auto_complete(self, config: mc.ModelConfig, model_dir: Path, version_dir: Path | None) -> None:
        """Fill missing config fields from the model file (in place); ``version_dir`` is the
        highest version on disk, or ``None`` when there is none."""
        ...

    def create_instance(self, context: InstanceContext) -> ModelInstance:
        """Load one instance; raise :class:`InferenceServerError` with the reason on failure."""
        ...
