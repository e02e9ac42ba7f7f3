"""BLS (business logic scripting): Python models calling other models, or themselves, through the server.

``pb_utils.InferenceRequest(...).exec()``, ``await ....async_exec()`` and ``exec(decoupled=True)``
run a request the way a client's request runs: resolved to the serving version, checked against its
signature and queued in that model's scheduler, so it is batched with the model's other traffic.  The
server puts a :class:`Server` for that in the runtime the Python backend is made with (this layer
knows nothing of repositories or schedulers).  Model code runs on instance threads, so a call hops
to the server's event loop with ``asyncio.run_coroutine_threadsafe``: ``exec`` blocks only the
calling instance's thread, and ``async_exec`` awaits the same future on the model's own loop without
blocking anything.  The server's event loop never waits for a model.

Deadlocks: an instance waiting for a BLS answer executes nothing else, so a request that needs that very
instance (a model calling itself, or A -> B -> A) would wait in its queue forever.  Every BLS request
therefore carries the chain of instances waiting for it, and a call to a model version with an
instance on the caller's chain runs inline on that instance, as a nested ``execute``: it is idle by
construction, since it waits for this very call.  An in-process instance runs it on the caller's
thread; one in a worker process gets a nested execution over its socket, which its waiting model
thread runs.  Any other call goes through the scheduler, where waiting takes instance threads only
(as many as there are instances), never the event loop.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import queue
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from naiad.backends.base import ExecuteResult
from naiad.backends.python import pb_utils
from naiad.backends.python.response import bytes_array, to_pb_response
from naiad.core.errors import CancelledError, InferenceServerError, InternalError, UnsupportedError
from naiad.core.request import InferRequest, InferResponse, RequestedOutput, Tensor

# ``asyncio`` is imported where it is used: a model process imports this module, and asyncio (with
# ssl) is about 3 MiB of objects that every model process forked from the template would hold and
# count in its resident memory, whether or not its model is ``async`` (see zygote.py).
if TYPE_CHECKING:
    import asyncio

    from naiad.backends.runtime import Runtime

log = logging.getLogger(__name__)

T = TypeVar("T")

#: One answer of a streamed request: a response, an error or nothing, and whether it is the last.
StreamItem = tuple[InferResponse | InferenceServerError | None, bool]


class Server(Protocol):
    """How BLS requests reach models: the server's, in its :class:`~naiad.backends.runtime.Runtime`."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the server's schedulers run on."""
        ...

    async def infer(self, request: InferRequest) -> InferResponse:
        """Run ``request`` as a client's request; raise ``InferenceServerError`` on failure."""
        ...

    def stream(self, request: InferRequest) -> AsyncIterator[StreamItem]:
        """Every answer of ``request`` (a decoupled model's 0..N, then the final flag)."""
        ...

    def check(self, request: InferRequest) -> tuple[int, bool]:
        """The version number that would serve ``request`` and whether its model is decoupled, once
        ``request`` is checked against that version's signature (called on the loop); raise
        ``InferenceServerError`` as :meth:`infer` would."""
        ...

    async def load_model(self, name: str, parameters: dict[str, Any]) -> None:
        """Load or reload ``name`` as the repository extension does (``config``, ``file:...``)."""
        ...

    async def unload_model(self, name: str, unload_dependents: bool) -> None:
        """Unload ``name`` as the repository extension does."""
        ...

    async def model_ready(self, name: str, version: str) -> bool:
        """Whether ``name`` (``version``: "" for the default) is ready, as a readiness request says."""
        ...


class Inline(Protocol):
    """An instance that can run requests for a caller it waits for (see the module docs)."""

    def run_inline(self, requests: list[InferRequest]) -> list[ExecuteResult]: ...

    async def run_inline_async(self, requests: list[InferRequest]) -> list[ExecuteResult]: ...


@dataclass(frozen=True, slots=True, eq=False)
class Caller:
    """An instance that makes BLS calls: which model version, and how to run a request inline on it."""

    model_name: str
    model_version: int
    inline: Inline


#: The instances waiting, up the call chain, for whatever the current execution computes.
_CHAIN: contextvars.ContextVar[tuple[Caller, ...]] = contextvars.ContextVar("naiad_bls_chain", default=())
#: The chain of each BLS request in flight (by ``id`` of the server request), for its target to extend.
_chains: dict[int, tuple[Caller, ...]] = {}


@contextmanager
def executing(caller: Caller, requests: Sequence[InferRequest]) -> Iterator[None]:
    """Mark BLS calls made in the block as made by ``caller`` on behalf of ``requests``' callers."""
    chain: tuple[Caller, ...] = (caller,)
    if _chains:
        for request in requests:
            for waiting in _chains.get(id(request), ()):
                if waiting not in chain:
                    chain += (waiting,)
    token = _CHAIN.set(chain)
    try:
        yield
    finally:
        _CHAIN.reset(token)


@contextmanager
def _waiting(request: InferRequest) -> Iterator[None]:
    """While ``request`` is in flight, the current chain waits for it."""
    chain = _CHAIN.get()
    if not chain:
        yield
        return
    _chains[id(request)] = chain
    try:
        yield
    finally:
        _chains.pop(id(request), None)


# ---- conversions ------------------------------------------------------------------------------------


def core_request(request: pb_utils.InferenceRequest) -> InferRequest:
    """A BLS request as the server's request (tensors are passed by reference)."""
    inputs = []
    for tensor in request.inputs():
        if not isinstance(tensor, pb_utils.Tensor):
            raise pb_utils.TritonModelException(
                f"BLS request inputs must be pb_utils.Tensor, got {type(tensor).__name__}"
            )
        data = tensor._array  # as_numpy() refuses BF16, which BLS passes on as it is
        inputs.append(
            Tensor(
                tensor.name(), tensor._datatype, bytes_array(data) if tensor._datatype == "BYTES" else data
            )
        )
    parameters = json.loads(request.parameters())
    for key, value in parameters.items():
        if not isinstance(value, bool | int | float | str):
            raise pb_utils.TritonModelException(
                f"BLS request parameter '{key}' must be a bool, int, float or str, got {type(value).__name__}"
            )
    version = getattr(request, "_model_version", -1)
    flags = request.flags()
    names = request.requested_output_names()
    return InferRequest(
        model_name=request.model_name(),
        model_version="" if version is None or int(version) < 0 else str(int(version)),
        id=request.request_id(),
        inputs=inputs,
        outputs=[RequestedOutput(name) for name in names] if names else None,
        parameters=parameters,
        timeout_us=request.timeout(),
        sequence_id=request.correlation_id(),
        sequence_start=bool(flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START),
        sequence_end=bool(flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END),
    )


def _selected(result: ExecuteResult, request: InferRequest) -> ExecuteResult:
    """Only the outputs ``request`` asked for (what the server does for requests it routes)."""
    if isinstance(result, InferResponse) and request.outputs is not None:
        wanted = {output.name for output in request.outputs}
        result.outputs = [tensor for tensor in result.outputs if tensor.name in wanted]
    return result


async def _outcome(server: Server, request: InferRequest) -> InferResponse | InferenceServerError:
    """The answer to a BLS request: its response, or the error it failed with."""
    try:
        return await server.infer(request)
    except InferenceServerError as exc:
        return exc
    except Exception as exc:  # a server bug must come back as an error response, not hang the model
        log.exception("BLS request for model '%s' failed", request.model_name)
        return InternalError(f"{type(exc).__name__}: {exc}")


async def _answer(server: Server, request: InferRequest) -> pb_utils.InferenceResponse:
    return to_pb_response(await _outcome(server, request))


# ---- decoupled answers ------------------------------------------------------------------------------


class Answers(Protocol):
    """Where a streamed call's answers wait for the model: a queue, or (in a model process) the
    stream that its channel to the server fills."""

    def get(self) -> StreamItem:
        """The next answer, waiting for it."""
        ...


class ResponseIterator:
    """The responses of a ``decoupled=True`` BLS request, as Triton's iterator yields them: each
    response, and last the final one (empty when the model sent the final flag on its own).

    ``exec``/``async_exec`` return it once the first answer came (:meth:`first`), as Triton's do: an
    ``async def execute`` that awaits several calls and then iterates each (blocking its loop) has
    made all of them by then, and they run at once."""

    def __init__(self, items: Answers, cancel: Callable[[], object]) -> None:
        self._items = items
        self._cancel = cancel
        self._done = False
        self._first: StreamItem | None = None

    def first(self) -> ResponseIterator:
        """Wait for the first answer (kept for ``__next__``); this iterator."""
        if self._first is None and not self._done:
            self._first = self._items.get()
        return self

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> pb_utils.InferenceResponse:
        if self._done:
            raise StopIteration
        item, self._first = self._first, None
        answer, final = item if item is not None else self._items.get()
        self._done = final
        return to_pb_response(answer)

    def cancel(self) -> None:
        """Cancel the request, as Triton's iterator does: the called model sees ``is_cancelled()``
        and may stop (its last response then usually says CANCELLED, as one still queued is
        answered), or go on; either way the iterator yields what it sends, to its final flag."""
        self._cancel()


def cancel(request: InferRequest) -> None:
    """Cancel a BLS request (:meth:`ResponseIterator.cancel`)."""
    request.cancel()


def _pump(server: Server, request: InferRequest) -> tuple[queue.SimpleQueue[StreamItem], Future[None]]:
    """Start streaming ``request``'s answers into a queue a model thread can block on; and the
    streaming (cancelling it drops the request, as a client that goes away does)."""
    items: queue.SimpleQueue[StreamItem] = queue.SimpleQueue()
    chain = _CHAIN.get()

    import asyncio

    async def pump() -> None:
        if chain:
            _chains[id(request)] = chain
        try:
            async for item in server.stream(request):
                items.put(item)
        except InferenceServerError as exc:
            items.put((exc, True))
        except asyncio.CancelledError:
            items.put((CancelledError("the BLS request was cancelled"), True))
            raise
        except Exception as exc:
            log.exception("streamed BLS request for model '%s' failed", request.model_name)
            items.put((InternalError(f"{type(exc).__name__}: {exc}"), True))
        finally:
            _chains.pop(id(request), None)

    return items, asyncio.run_coroutine_threadsafe(pump(), server.loop)


def forwarded(
    server: Server | None, request: InferRequest, decoupled: bool
) -> tuple[queue.SimpleQueue[StreamItem], Future[None] | None]:
    """Make a BLS call a model's process forwarded: where its answers come, in order, the last one
    final; and, for a call still streaming, the streaming (``None``: every answer is queued).

    Runs on the thread of the instance that talks to that process, which waits for a call that is
    not streamed (and runs the call as a nested execution of that process when it needs that very
    instance); a streamed call's answers come while the model process goes on.  ``server``: the
    runtime's (``None``: BLS is unavailable)."""
    items: queue.SimpleQueue[StreamItem] = queue.SimpleQueue()
    if server is None:
        items.put((InternalError("BLS requests can only be made while the model is served"), True))
        return items, None
    inline, target_decoupled = None, False
    if _candidates(request):  # maybe a call back into a waiting instance
        checked = _wait(server.loop, _call(_checked, server, request))
        inline, target_decoupled = _inline_target(request, checked)
    if inline is not None:
        if target_decoupled and not decoupled:
            items.put((_unstreamed(request), True))
            return items, None
        return _inline(inline, request, target_decoupled), None
    if not decoupled:
        with _waiting(request):
            items.put((_wait(server.loop, _outcome(server, request)), True))
        return items, None
    return _pump(server, request)


# ---- calls that run inline ----------------------------------------------------------------------------


def _candidates(request: InferRequest) -> list[Caller]:
    """Instances up the call chain that belong to the requested model and can run it inline."""
    return [c for c in _CHAIN.get() if c.model_name == request.model_name]


def _checked(server: Server, request: InferRequest) -> tuple[int, bool]:
    """:meth:`Server.check`, with version -1 for a request that would fail (the normal path then
    reports why)."""
    try:
        return server.check(request)
    except InferenceServerError:
        return -1, False


def _inline_target(request: InferRequest, checked: tuple[int, bool]) -> tuple[Inline | None, bool]:
    """The waiting instance that must run ``request`` inline (``None``: the scheduler runs it), and
    whether its model is decoupled; ``checked`` is :func:`_checked` for ``request``."""
    version, decoupled = checked
    for caller in _candidates(request):
        if caller.model_version == version:
            return caller.inline, decoupled
    return None, decoupled


def _unstreamed(request: InferRequest) -> UnsupportedError:
    return UnsupportedError(f"model '{request.model_name}' is decoupled: call exec(decoupled=True)")


def _inline_queue(request: InferRequest, decoupled: bool) -> queue.SimpleQueue[StreamItem]:
    """Where the answers of a request run inline go (a decoupled model sends them to its sink)."""
    items: queue.SimpleQueue[StreamItem] = queue.SimpleQueue()
    if decoupled:
        request.responses = lambda answer, final: items.put((answer, final))
    return items


def _settle(
    request: InferRequest, result: ExecuteResult, decoupled: bool, items: queue.SimpleQueue[StreamItem]
) -> None:
    """Queue what an inline execution's result says: the answer of a model that answers through it,
    or the error a decoupled model's execution failed with (it sent nothing)."""
    if not decoupled:
        items.put((_selected(result, request), True))
    elif isinstance(result, InferenceServerError):
        items.put((result, True))


def _inline(inline: Inline, request: InferRequest, decoupled: bool) -> queue.SimpleQueue[StreamItem]:
    items = _inline_queue(request, decoupled)
    with _waiting(request):
        _settle(request, inline.run_inline([request])[0], decoupled, items)
    return items


async def _inline_async(
    inline: Inline, request: InferRequest, decoupled: bool
) -> queue.SimpleQueue[StreamItem]:
    items = _inline_queue(request, decoupled)
    with _waiting(request):
        _settle(request, (await inline.run_inline_async([request]))[0], decoupled, items)
    return items


def _returned(items: queue.SimpleQueue[StreamItem], request: InferRequest, decoupled: bool) -> Any:
    """What ``exec`` returns for answers queued in ``items``: the one answer, or an iterator."""
    if decoupled:
        return ResponseIterator(items, functools.partial(cancel, request))
    return to_pb_response(items.get()[0])


# ---- the runner pb_utils calls ----------------------------------------------------------------------


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    import asyncio

    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


async def _call(function: Callable[..., T], *args: Any) -> T:
    return function(*args)


def _wait(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on the server's loop and block this (model) thread until it is done."""
    import asyncio

    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


async def _on(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on the server's loop and await it from the model's own loop."""
    import asyncio

    if _on_loop(loop):
        return await coroutine
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))


def model_control(server: Server | None, message: tuple[Any, ...]) -> Any:
    """A model's call to the model loading API (python_backend 23.07+), made from the model's thread
    on the server's loop: ``("load", name, config, files)``, ``("unload", name, unload_dependents)``
    or ``("ready", name, version)``.  The server's refusal (not EXPLICIT mode, a failed load...)
    raises ``TritonModelException`` with its message, as Triton's ``pb_utils`` raises it."""
    if server is None:
        raise pb_utils.TritonModelException(
            "The model loading API can only be used while the model is served"
        )
    loop = server.loop
    if _on_loop(loop):
        raise pb_utils.TritonModelException("The model loading API would block the server's event loop")
    kind, name = message[0], message[1]
    try:
        if kind == "load":
            parameters: dict[str, Any] = dict(message[3])
            if message[2]:
                parameters["config"] = message[2]
            _wait(loop, server.load_model(name, parameters))
            return None
        if kind == "unload":
            _wait(loop, server.unload_model(name, bool(message[2])))
            return None
        return _wait(loop, server.model_ready(name, message[2]))
    except InferenceServerError as error:
        raise pb_utils.TritonModelException(error.message) from None


class Runner:
    """The BLS runner of models in the engine (see ``pb_utils.ModelServices``): calls go to the BLS
    server of ``runtime``."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def _server(self) -> Server:
        server = self._runtime.bls
        if server is None:
            raise pb_utils.TritonModelException("BLS requests can only be made while the model is served")
        return server

    def model_control(self, message: tuple[Any, ...]) -> Any:
        return model_control(self._runtime.bls, message)

    def exec(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        server = self._server()
        loop = server.loop
        if _on_loop(loop):
            raise pb_utils.TritonModelException(
                "InferenceRequest.exec() would block the server's event loop: use async_exec()"
            )
        core = core_request(request)
        if _candidates(core):  # maybe a call back into a waiting instance
            inline, target_decoupled = _inline_target(core, _wait(loop, _call(_checked, server, core)))
            if inline is not None:
                if target_decoupled and not decoupled:
                    return to_pb_response(_unstreamed(core))
                return _returned(_inline(inline, core, target_decoupled), core, decoupled)
        if decoupled:
            return ResponseIterator(_pump(server, core)[0], functools.partial(cancel, core)).first()
        with _waiting(core):
            return _wait(loop, _answer(server, core))

    async def async_exec(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        server = self._server()
        loop = server.loop
        core = core_request(request)
        if _candidates(core):
            inline, target_decoupled = _inline_target(core, await _on(loop, _call(_checked, server, core)))
            if inline is not None:
                if target_decoupled and not decoupled:
                    return to_pb_response(_unstreamed(core))
                return _returned(await _inline_async(inline, core, target_decoupled), core, decoupled)
        if decoupled:
            import asyncio

            iterator = ResponseIterator(_pump(server, core)[0], functools.partial(cancel, core))
            return await asyncio.to_thread(iterator.first)
        with _waiting(core):
            return await _on(loop, _answer(server, core))
