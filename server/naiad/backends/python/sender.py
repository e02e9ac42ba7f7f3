"""``request.get_response_sender()``: how a Python model answers a request on its own schedule.

A decoupled model (``model_transaction_policy { decoupled: true }``) sends 0..N responses per request
and then the final flag, during ``execute`` or later from any thread; each send goes straight to the
request's ``responses`` sink, which the data plane drains to the client.  A non-decoupled model may
use a sender too (Triton allows it since 24.06): exactly one response, then final, before or after
``execute`` returned ``None`` (or ``None`` in its list for that request); the response is then the
request's result.  The checks and their messages are
Triton's, because models written for Triton test for them.
"""

from __future__ import annotations

import logging
import threading

from naiad.backends.base import ExecuteResult
from naiad.backends.python import pb_utils
from naiad.backends.python.reshapes import Reshapes
from naiad.backends.python.response import to_result
from naiad.core.errors import CancelledError, InferenceServerError
from naiad.core.request import InferRequest

log = logging.getLogger(__name__)

_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
#: How often a wait for a response still to come checks whether the client gave up.
_CANCEL_CHECK_S = 0.1


class ResponseSender:
    """Sends a request's responses: to its sink (decoupled models) or into :attr:`result`."""

    __slots__ = (
        "_answered",
        "_closed",
        "_decoupled",
        "_lock",
        "_model_name",
        "_model_version",
        "_request",
        "_reshapes",
        "_sent",
        "result",
    )

    def __init__(
        self,
        request: InferRequest,
        decoupled: bool,
        model_name: str,
        model_version: str,
        reshapes: Reshapes | None = None,
    ) -> None:
        self._request = request
        self._reshapes = reshapes
        self._decoupled = decoupled
        self._model_name = model_name
        self._model_version = model_version
        self._lock = threading.Lock()
        self._closed = False
        self._sent = 0
        #: A non-decoupled model's one response, once sent (and ``_answered`` set).
        self.result: ExecuteResult | None = None
        self._answered = threading.Event()

    def send(self, response: pb_utils.InferenceResponse | None = None, flags: int = 0) -> None:
        if flags not in (0, _FINAL):
            raise pb_utils.TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise pb_utils.TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent:
                    raise pb_utils.TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than one response."
                    )
                if response is None and not self._sent:
                    raise pb_utils.TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete final before "
                        "sending a response."
                    )
            if self._closed:
                raise pb_utils.TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            self._closed = flags == _FINAL
            self._sent += 1
            result = None
            if response is not None:
                result = to_result(
                    response, self._request, 0, self._model_name, self._model_version, self._reshapes
                )
            if not self._decoupled:
                if result is not None:
                    self.result = result
                    self._answered.set()
                return
            sink = self._request.responses
            if sink is None:  # a warm-up run, or a caller that does not read answers
                log.debug("model '%s' sent a response nobody reads", self._model_name)
                return
            sink(result, self._closed)

    def answer(self) -> ExecuteResult:
        """A non-decoupled request's response, once the model sent it (it may come from a thread
        after ``execute`` returned); Triton's CANCELLED error if the client gives up first."""
        while not self._answered.wait(_CANCEL_CHECK_S):
            if self._request.cancelled:
                return CancelledError("Request was cancelled")
        assert self.result is not None
        return self.result

    def fail(self, error: InferenceServerError) -> None:
        """End a decoupled request's stream with ``error``, unless the model ended it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sink = self._request.responses
        if sink is not None:
            sink(error, True)

    def is_cancelled(self) -> bool:
        """True once the client has given up on the request (the model may stop sending)."""
        return self._request.cancelled
