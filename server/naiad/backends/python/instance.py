"""A model instance hosted in this interpreter: the engine side of :class:`ModelHost`.

It turns server requests into ``pb_utils`` requests and the model's responses back into server
results.  It runs in a model process (:mod:`naiad.backends.python.stub`), or inside the engine for a
trusted model that opted into it: the same class in both places, so both behave the same way.  It
imports no protobuf and no tritonclient, which a model process does not need.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from naiad.backends.base import ExecuteResult, Rescheduled
from naiad.backends.python import bls, pb_utils
from naiad.backends.python.host import ModelHost, describe, where
from naiad.backends.python.request import Marks, ReceivedRequest
from naiad.backends.python.reshapes import Reshapes
from naiad.backends.python.response import to_results
from naiad.backends.python.spec import ModelSpec
from naiad.core.errors import InternalError
from naiad.core.request import InferRequest, InferResponse

log = logging.getLogger(__name__)

_SERVICES = pb_utils.SERVICES
_RESCHEDULE = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


class PythonModelInstance:
    """One loaded instance; ``execute`` is called only from the instance's own thread.

    ``run_inline`` and ``run_inline_async`` run a BLS request on the calling thread instead, for a
    caller this instance is waiting for (see :mod:`naiad.backends.python.bls`).
    """

    __slots__ = (
        "_caller",
        "_decoupled",
        "_host",
        "_instance_name",
        "_issues_requests",
        "_model_name",
        "_model_version",
        "_outputs",
        "_reshapes",
        "_services",
    )

    def __init__(self, spec: ModelSpec, services: pb_utils.ModelServices) -> None:
        self._model_name = spec.model_name
        self._model_version = spec.model_version
        self._instance_name = spec.instance_name
        self._outputs = spec.outputs
        self._decoupled = spec.decoupled
        self._reshapes = Reshapes.of(spec)
        self._caller = bls.Caller(spec.model_name, int(spec.model_version), self)
        self._services = services
        token = _SERVICES.set(services)
        try:
            with services.metrics.owned_by(id(self)):  # the metric families it creates leave with it
                self._host = ModelHost(spec.model_file, spec.model_name, spec.args, spec.decoupled)
        finally:
            _SERVICES.reset(token)
        # A model that builds BLS requests blocks its thread until they are answered on the event
        # loop, so it must never run on that loop (see ``inline_safe``).  Reading the source is
        # conservative: any mention disqualifies the model from inline execution, nothing else.
        self._issues_requests = mentions_requests(spec.model_file.parent)

    @property
    def inline_safe(self) -> bool:
        """Whether the scheduler may run this instance's ``execute`` on the event loop thread.

        True for a synchronous, non-decoupled model that issues no BLS requests: such an execution
        never waits for the loop, so when it is short, running it in place saves the two thread
        hand-offs that otherwise cost more than the model itself (add_sub takes a few µs).
        """
        return not self._decoupled and not self._issues_requests and self._host.synchronous

    @property
    def checks_readiness(self) -> bool:
        """Whether its model defines ``is_ready()``: asked at each readiness request (see
        :mod:`naiad.repository.readiness`)."""
        return self._host.defines_is_ready

    def readiness(self) -> str:
        """ "" if the model's ``is_ready()`` says it is ready, else why not, in Triton's words (a
        False is the backend's message, an error the model's); on the calling thread."""
        token = _SERVICES.set(self._services)
        try:
            ready, error = self._host.is_ready()
        finally:
            _SERVICES.reset(token)
        if ready:
            return ""
        return error or f"Model '{self._instance_name}' is not ready (user-defined check failed)."

    def ask_readiness(self) -> Future[str]:
        """:meth:`readiness`, on a thread of its own (in the engine: the model may take its time)."""
        answer: Future[str] = Future()
        threading.Thread(
            target=lambda: answer.set_result(self.readiness()), name="naiad-is-ready", daemon=True
        ).start()
        return answer

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        received = self._received(requests)
        token = _SERVICES.set(self._services)
        try:
            failed = functools.partial(self._background_failed, received) if self._decoupled else None
            if self._issues_requests:
                with bls.executing(self._caller, requests):
                    returned = self._host.execute(received, failed)
            else:  # no BLS call can be made on these requests' behalf: nothing to mark
                returned = self._host.execute(received, failed)
        except Exception as exc:
            return self._failed(exc, received)
        finally:
            _SERVICES.reset(token)
        return self._results(returned, received, requests)

    def run_inline(self, requests: list[InferRequest]) -> list[ExecuteResult]:
        """``execute``, on the calling thread (an async ``execute`` gets a loop of its own when
        the host's is busy with the execution that waits for this one)."""
        return self.execute(requests)

    async def run_inline_async(self, requests: list[InferRequest]) -> list[ExecuteResult]:
        received = self._received(requests)
        token = _SERVICES.set(self._services)
        try:
            with bls.executing(self._caller, requests):
                returned = self._host.call(received)
                if inspect.iscoroutine(returned):
                    returned = await returned
        except Exception as exc:
            return self._failed(exc, received)
        finally:
            _SERVICES.reset(token)
        return self._results(returned, received, requests)

    def _received(self, requests: Sequence[InferRequest]) -> list[ReceivedRequest]:
        outputs = self._outputs
        decoupled = self._decoupled
        marks = Marks()
        reshapes = self._reshapes
        return [ReceivedRequest(request, outputs, decoupled, marks, reshapes) for request in requests]

    def _failed(self, exc: Exception, received: list[ReceivedRequest]) -> list[ExecuteResult]:
        """Every request fails with the exception, but one a non-decoupled model already answered
        through its sender (a second send raises, and the first one stands, as in Triton)."""
        message = self._failure(exc)
        log.error("%s", message)  # as Triton's stub logs it
        return [self._answered(request) or InternalError(message) for request in received]

    def _failure(self, exc: BaseException) -> str:
        """Triton 2.51's wording (its stub's), the model's frames included (checked side by side)."""
        return (
            f"Failed to process the request(s) for model '{self._instance_name}', "
            f"message: {describe(exc)}{where(exc)}"
        )

    def _answered(self, request: ReceivedRequest) -> ExecuteResult | None:
        """The response a non-decoupled model sent for ``request`` through its sender, if any."""
        sender = request.sender
        return sender.result if sender is not None and not self._decoupled else None

    def _background_failed(self, received: list[ReceivedRequest], exc: BaseException) -> None:
        """A decoupled model's ``async def execute``, not waited for, raised: the streams it left open
        end with the error a failed execution gives (Triton only logs it, and they never end)."""
        message = self._failure(exc)
        for request in received:
            request.get_response_sender().fail(InternalError(message))

    def _results(
        self, returned: Any, received: list[ReceivedRequest], requests: Sequence[InferRequest]
    ) -> list[ExecuteResult]:
        """What ``execute`` returned, as one result per request (see :mod:`.sender` for ``None``);
        a request the model released for rescheduling gets :class:`Rescheduled`."""
        name, version = self._model_name, self._model_version
        marked = bool(received) and received[0]._marks.any
        if not marked:  # no sender asked for, no request rescheduled: most executions
            if self._decoupled:
                if returned is None:
                    return [InferResponse(name, version, request.id) for request in requests]
            elif returned is not None:
                return to_results(returned, requests, name, version, self._reshapes)
        rescheduled = [i for i, request in enumerate(received) if request.released_flags() == _RESCHEDULE]
        if self._decoupled:
            if returned is not None:
                error = InternalError(
                    f"Python model '{self._instance_name}' is using the decoupled mode and the execute "
                    "function must return None."
                )
                return [error for _ in requests]
            results: list[ExecuteResult] = [InferResponse(name, version, request.id) for request in requests]
        elif returned is None:
            results = [
                Rescheduled() if index in rescheduled else self._sent(request)
                for index, request in enumerate(received)
            ]
        else:
            results = to_results(returned, requests, name, version, self._reshapes)
            listed = isinstance(returned, list) and len(returned) == len(requests)
            for index, request in enumerate(received):
                sender = request.sender
                if sender is None:
                    continue
                if sender.result is not None:  # a response sent first stands (Triton's rule)
                    results[index] = sender.result
                elif listed and returned[index] is None and index not in rescheduled:
                    results[index] = self._sent(request)  # its response is still to come
            if rescheduled and isinstance(returned, list) and len(returned) == len(requests):
                for index in rescheduled:
                    if returned[index] is not None:  # Triton's stub fails the whole execution
                        message = (
                            f"Failed to process the request(s) for model '{self._instance_name}', message: "
                            "Expected a None object in the execute function return list for reschduled "
                            f"request, found type '{type(returned[index])}'."
                        )
                        log.error("%s", message)
                        return [InternalError(message) for _ in requests]
        for index in rescheduled:
            results[index] = Rescheduled()
        return results

    def _sent(self, request: ReceivedRequest) -> ExecuteResult:
        """The one response a non-decoupled model sends through the request's sender, before or after
        ``execute`` returned (from a thread of its own, Triton 24.06+); this instance waits for it
        (Triton's stub may start its next execution meanwhile) until the client gives up."""
        sender = request.sender
        if sender is None:
            return InternalError(
                f"Expected a list in the execute return, got NoneType, and model '{self._model_name}' "
                f"sent no response for request '{request.request_id()}' through its response sender"
            )
        return sender.answer()

    def close(self) -> None:
        token = _SERVICES.set(self._services)
        try:
            self._host.close()  # ``finalize()``
        finally:
            _SERVICES.reset(token)
        self._services.metrics.release_owner(id(self))


def mentions_requests(folder: Path) -> bool:
    """Whether the model's sources (``model.py`` and the modules beside it) mention BLS requests, or
    the model loading API (its calls, too, wait for the server's event loop)."""
    return any(mentions(folder, word) for word in _CALLS_OUT)


#: What a model calls that waits for the server: BLS requests and the model loading API.
_CALLS_OUT = ("InferenceRequest", "load_model", "unload_model", "is_model_ready")


def mentions(folder: Path, word: str) -> bool:
    """Whether the model's sources mention ``word``: a conservative test that lets the engine skip
    work a model cannot need.  True when they cannot be read, and when no source in the folder
    defines ``TritonPythonModel`` on its own (a class imported from a module elsewhere, as NVIDIA's
    ``L0_model_namespacing`` models import theirs, or one with a base class: the word may be there)."""
    try:
        texts = [path.read_text(errors="replace") for path in folder.rglob("*.py")]
    except OSError:
        return True
    if not any(_STANDALONE.search(text) for text in texts):
        return True
    return any(word in text for text in texts)


#: ``class TritonPythonModel:`` (or ``()``, ``(object)``): a model class with no base to inherit from.
_STANDALONE = re.compile(r"^class\s+TritonPythonModel\s*(\(\s*(object)?\s*\))?\s*:", re.MULTILINE)
