"""The messages between a frontend worker and the engine, one tagged union per direction.

Each is a ``msgspec`` struct encoded as MessagePack: a receiver decodes into exactly the types it
expects and rejects anything else.  Tensors travel as :class:`TensorRef` descriptors into the shared
memory arenas (:mod:`naiad.ipc.arena`), never as pickles; ``inline`` carries the bytes only when an
arena had no room.
"""

from __future__ import annotations

from typing import Any

import msgspec

ParameterValue = bool | int | float | str

#: :attr:`Answer.trace` for a request the worker traced and the engine's sampling left out.
NOT_SAMPLED = -1

#: Which arena a tensor lives in.
REQUEST_ARENA = 0
RESPONSE_ARENA = 1
INLINE = -1


class TensorRef(msgspec.Struct, array_like=True):
    """A tensor: its bytes at ``offset`` in ``arena`` (``INLINE``: in ``inline``), wire layout."""

    name: str
    datatype: str
    shape: list[int]
    arena: int
    offset: int
    nbytes: int
    inline: bytes | None = None
    parameters: dict[str, ParameterValue] = {}


class OutputRef(msgspec.Struct, array_like=True):
    name: str
    parameters: dict[str, ParameterValue] = {}


class RequestMsg(msgspec.Struct, array_like=True):
    """An :class:`~naiad.core.request.InferRequest` with its tensors as descriptors."""

    model_name: str
    model_version: str
    id: str
    inputs: list[TensorRef]
    outputs: list[OutputRef] | None
    parameters: dict[str, ParameterValue]
    priority: int
    timeout_us: int
    sequence_id: int | str
    sequence_start: bool
    sequence_end: bool
    headers: dict[str, str]
    traced: bool
    #: The catalog (its id) whose signature of the model the worker checked the request against;
    #: 0 when it did not (or the check failed: the engine words the error).
    validated: int = 0
    #: The client shared memory regions the worker read inputs from (``InferRequest.regions``).
    regions: list[str] | None = None


class ResponseMsg(msgspec.Struct, array_like=True):
    model_name: str
    model_version: str
    id: str
    outputs: list[TensorRef]
    parameters: dict[str, ParameterValue]


class ErrorMsg(msgspec.Struct, array_like=True):
    """An :class:`~naiad.core.errors.InferenceServerError`: Triton's code name and the message, and
    whether it is the model's own error response (:class:`~naiad.core.errors.ErrorResponse`)."""

    code: str
    message: str
    response: bool = False


# ---- worker -> engine ----------------------------------------------------------------------------


class Serving(msgspec.Struct, tag=True, array_like=True):
    """The worker's listeners are up: it counts towards readiness."""


class Infer(msgspec.Struct, tag=True, array_like=True):
    """One request answered once (:meth:`DataPlane.infer`)."""

    id: int
    request: RequestMsg


class Stream(msgspec.Struct, tag=True, array_like=True):
    """One request answered 0..N times (:meth:`DataPlane.stream`)."""

    id: int
    request: RequestMsg


class Cancel(msgspec.Struct, tag=True, array_like=True):
    """The client of request ``id`` went away (or the worker stopped reading its stream)."""

    id: int


class Call(msgspec.Struct, tag=True, array_like=True):
    """A control-plane call: ``method`` is one of :data:`naiad.engine.session.CALLS`."""

    id: int
    method: str
    args: list[msgspec.Raw]


class Release(msgspec.Struct, tag=True, array_like=True):
    """Response-arena blocks the worker no longer reads (batched)."""

    offsets: list[int]


class Ack(msgspec.Struct, tag=True, array_like=True):
    """A broadcast (catalog, region, settings) is applied in this worker."""

    id: int


class TraceEnd(msgspec.Struct, tag=True, array_like=True):
    """A traced request's records, for the engine's trace file: ``id`` is the engine's verdict
    (:attr:`Answer.trace`), or 0 when the request never reached the engine (it is sampled then)."""

    id: int
    model: str
    records: list[dict[str, Any]]


ToEngine = Serving | Infer | Stream | Cancel | Call | Release | Ack | TraceEnd


# ---- engine -> worker ----------------------------------------------------------------------------


class Welcome(msgspec.Struct, tag=True, array_like=True):
    """The first message a worker reads: who it is and the server's settings (JSON)."""

    index: int
    settings: bytes
    arena_size: int


class Answer(msgspec.Struct, tag=True, array_like=True):
    """One answer to request ``id``: a response, an error, or (``empty``) only the final flag.

    ``done``: the engine is finished with the request (its input blocks are the worker's again); an
    ``error`` in a ``done`` answer is raised, as the in-process data plane raises it.  ``timestamps``
    carries the trace points the engine added, for a traced request, and ``trace`` (in the ``done``
    answer) the engine's sampling verdict on it: the trace's id, :data:`NOT_SAMPLED`, or 0 when the
    request was not traced.
    """

    id: int
    final: bool
    response: ResponseMsg | None = None
    error: ErrorMsg | None = None
    empty: bool = False
    done: bool = False
    timestamps: list[tuple[str, int]] | None = None
    trace: int = 0


class Reply(msgspec.Struct, tag=True, array_like=True):
    """The result of a :class:`Call`: a value (MessagePack) or an error."""

    id: int
    value: msgspec.Raw = msgspec.Raw(b"\xc0")  # MessagePack's nil
    error: ErrorMsg | None = None


class VersionEntry(msgspec.Struct, array_like=True):
    version: int
    state: str
    reason: str
    model_dir: str | None
    #: Whether its readiness asks its instances (the worker then asks the engine).
    checked: bool = False


class MirrorEntry(msgspec.Struct, array_like=True):
    version: int
    percent: float


class ModelEntry(msgspec.Struct, array_like=True):
    """What a worker needs to answer metadata, config and readiness for one model locally (the
    routing of requests naming no version included, so it resolves them as the engine does)."""

    name: str
    path: str
    config: bytes
    config_json: bytes
    signature: bytes
    versions: list[VersionEntry]
    reason: str
    default_version: int | None
    version_weights: dict[int, int] | None = None
    mirror: MirrorEntry | None = None
    #: Its repository under ``--model-namespacing`` ("" otherwise).
    namespace: str = ""


class Catalog(msgspec.Struct, tag=True, array_like=True):
    """The engine's published models and whether the server is ready (engine and every worker)."""

    id: int
    models: list[ModelEntry]
    ready: bool
    started: bool


class RegionChange(msgspec.Struct, tag=True, array_like=True):
    """A client shared-memory region registered (``key`` set) or unregistered (``key`` None)."""

    id: int
    name: str
    key: str | None
    offset: int
    byte_size: int


class TraceChange(msgspec.Struct, tag=True, array_like=True):
    id: int
    model: str
    changes: dict[str, list[str] | None]


class LogChange(msgspec.Struct, tag=True, array_like=True):
    id: int
    changes: msgspec.Raw


ToWorker = Welcome | Answer | Reply | Catalog | RegionChange | TraceChange | LogChange
