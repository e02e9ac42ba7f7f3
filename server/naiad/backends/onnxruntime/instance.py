"""One loaded ONNX model: a session, whose ``session.run`` calls run the requests.

Grouping requests into batched calls, splitting outputs back and per-request errors come from
:mod:`naiad.backends.framework`; this module adds what is ORT's own: the session and its run options,
the string conversions ORT's Python API needs, and computing only the outputs some request asked for.
An ORT error fails the requests of that run with INTERNAL and leaves the session usable, as in Triton.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnxruntime as ort

from naiad.backends.base import InstanceContext
from naiad.backends.framework import Array, Feed, FrameworkInstance
from naiad.backends.onnxruntime import tensors
from naiad.backends.onnxruntime.bindings import Binding
from naiad.core.request import InferRequest


class OnnxRuntimeInstance(FrameworkInstance[ort.InferenceSession, Binding]):
    """A :class:`~naiad.backends.base.ModelInstance` backed by one ``InferenceSession``."""

    def __init__(
        self,
        context: InstanceContext,
        session: ort.InferenceSession,
        run_options: ort.RunOptions,
        inputs: dict[str, Binding],
        outputs: dict[str, Binding],
    ) -> None:
        ragged = frozenset(name for name, binding in inputs.items() if binding.ragged)
        super().__init__(context, session, inputs, outputs, ragged)
        self._run_options = run_options
        #: Whether an output is BYTES, which ORT returns as ``str`` objects (converted per call).
        self._text_outputs = any(binding.datatype == "BYTES" for binding in outputs.values())
        # ``InferenceSession.run`` checks in Python, on every call, what always holds here (numpy
        # feeds holding every input the model has, which loading made sure the config requires; no
        # WebGPU graph capture), and retries on the CPU when a GPU provider fails, which a server
        # should not do quietly (Triton does not): ~6 us of a ~15 us ``add_sub`` execution on this
        # project's machine.  So calls go to the binding's own ``run`` (the wrapper's ``_sess``,
        # there since ORT 1.0), or through the wrapper on an ORT without it.
        self._binding = getattr(session, "_sess", None)

    def _release(self) -> None:
        """The binding holds the session too: dropped with it, so closing frees the model now."""
        self._binding = None

    def _convert_input(self, binding: Binding, array: Array) -> Array:
        """BYTES as ``str`` objects (ORT reads ``bytes`` as their repr), other types in the exact dtype."""
        return tensors.to_model(binding.name, binding.datatype, array)

    def _compute(
        self, model: ort.InferenceSession, inputs: Feed, requests: Sequence[InferRequest]
    ) -> dict[str, Array]:
        """One ``session.run`` computing only the outputs ``requests`` ask for; BYTES back to ``bytes``."""
        outputs = self._output_names(requests)
        run = model.run if self._binding is None else self._binding.run
        produced = run(outputs, inputs, self._run_options)
        if not self._text_outputs:
            return dict(zip(outputs, produced, strict=True))
        return {
            name: tensors.from_model(self._outputs[name].datatype, array)
            for name, array in zip(outputs, produced, strict=True)
        }
