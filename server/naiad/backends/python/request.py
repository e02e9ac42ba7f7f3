"""The request a Python model's ``execute`` receives, as a thin view of the server's request.

One is built per request on the hot path, so it holds a reference to the core request and derives
everything on demand: no tensor is copied and input wrappers are made only when the model asks.
"""

from __future__ import annotations

import json

from naiad.backends.python import pb_utils
from naiad.backends.python.reshapes import Reshapes
from naiad.backends.python.sender import ResponseSender
from naiad.core.request import InferRequest


class Marks:
    """Whether the model asked a request of an execution for its response sender or set its release
    flags: only then are the execution's requests looked at one by one for them (most never are)."""

    __slots__ = ("any",)

    def __init__(self) -> None:
        self.any = False


class ReceivedRequest(pb_utils.InferenceRequest):
    """``pb_utils.InferenceRequest`` over a core :class:`InferRequest`.

    ``sender`` is the response sender once the model asked for one (see :mod:`.sender`).
    """

    __slots__ = ("_all_outputs", "_core", "_decoupled", "_marks", "_reshapes", "_tensors", "sender")

    def __init__(
        self,
        core: InferRequest,
        all_outputs: tuple[str, ...],
        decoupled: bool,
        marks: Marks,
        reshapes: Reshapes | None = None,
    ) -> None:
        # The base class's fields stay unset: every accessor below reads ``core`` instead.
        self._core = core
        self._all_outputs = all_outputs
        self._decoupled = decoupled
        self._marks = marks
        self._reshapes = reshapes
        self._tensors: list[pb_utils.Tensor] | None = None
        self.sender: ResponseSender | None = None
        # (``_release_flags`` is set only by ``set_release_flags``: ``released_flags`` reads it)

    def released_flags(self) -> int:
        """How ``execute`` released this request (``TRITONSERVER_REQUEST_RELEASE_ALL`` unless set)."""
        return getattr(self, "_release_flags", pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL)

    def set_release_flags(self, flags: int) -> None:
        self._release_flags = flags
        self._marks.any = True

    def inputs(self) -> list[pb_utils.Tensor]:
        tensors = self._tensors
        if tensors is None:
            wrap = pb_utils.Tensor._wrap
            given = self._core.inputs if self._reshapes is None else self._reshapes.inputs(self._core.inputs)
            tensors = self._tensors = [wrap(t.name, t.datatype, t.data) for t in given]
        return tensors

    def request_id(self) -> str:
        return self._core.id

    def correlation_id(self) -> int | str:
        return self._core.sequence_id

    def requested_output_names(self) -> list[str]:
        """The outputs the client asked for; every configured output when it named none."""
        outputs = self._core.outputs
        if outputs is None:
            return list(self._all_outputs)
        return [output.name for output in outputs]

    def flags(self) -> int:
        core = self._core
        return (pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START if core.sequence_start else 0) | (
            pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END if core.sequence_end else 0
        )

    def timeout(self) -> int:
        return self._core.timeout_us

    def parameters(self) -> str:
        return json.dumps(self._core.parameters)

    def model_name(self) -> str:
        return self._core.model_name

    def is_cancelled(self) -> bool:
        """True once the client has given up on this request (it may stop early)."""
        return self._core.cancelled

    def get_response_sender(self) -> ResponseSender:
        """The request's one sender (every call returns the same)."""
        sender = self.sender
        if sender is None:
            self._marks.any = True
            core = self._core
            sender = self.sender = ResponseSender(
                core, self._decoupled, core.model_name, core.model_version, self._reshapes
            )
        return sender
