"""One loaded ONNX model: a session, and ``execute`` turning requests into ``session.run`` calls.

Requests that can share a run (a batching model, the same inputs with the same non-batch shapes) are
concatenated along dim 0 and run once; the outputs are split back by each request's batch size.  A
request whose inputs cannot be converted fails alone; an ORT error fails the requests of that run
with INTERNAL and leaves the session usable, as in Triton.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import onnxruntime as ort

from naiad.backends import batching
from naiad.backends.base import ExecuteResult, InstanceContext
from naiad.backends.onnxruntime import tensors
from naiad.backends.onnxruntime.bindings import Binding
from naiad.core.errors import InferenceServerError, InternalError, InvalidArgumentError
from naiad.core.request import InferRequest, InferResponse, Tensor

Feed = dict[str, tensors.Array]


class OnnxRuntimeInstance:
    """A :class:`~naiad.backends.base.ModelInstance` backed by one ``InferenceSession``."""

    def __init__(
        self,
        context: InstanceContext,
        session: ort.InferenceSession,
        run_options: ort.RunOptions,
        inputs: dict[str, Binding],
        outputs: dict[str, Binding],
    ) -> None:
        self.model_name = context.model_name
        self.model_version = str(context.model_version)
        self.batching = context.config.max_batch_size > 0
        self._session: ort.InferenceSession | None = session
        self._run_options = run_options
        self._inputs = inputs
        self._outputs = outputs

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        results: dict[int, ExecuteResult] = {}
        groups: dict[Hashable, list[tuple[int, Feed]]] = {}
        for index, request in enumerate(requests):
            try:
                feed = self._feed(request)
            except InferenceServerError as exc:
                results[index] = exc
                continue
            key: Hashable = index if not self.batching else self._batch_key(feed)
            groups.setdefault(key, []).append((index, feed))
        for members in groups.values():
            chosen = [requests[index] for index, _ in members]
            for (index, _), result in zip(
                members, self._run(chosen, [feed for _, feed in members]), strict=True
            ):
                results[index] = result
        return [results[index] for index in range(len(requests))]

    def close(self) -> None:
        """Drop the session so ORT frees its memory (device memory included) now, not at GC."""
        self._session = None

    def _feed(self, request: InferRequest) -> Feed:
        """The request's inputs as the model takes them (converted, reshaped), still unbatched."""
        feed: Feed = {}
        for tensor in request.inputs:
            binding = self._inputs.get(tensor.name)
            if binding is None:
                raise InternalError(f"input '{tensor.name}' is not an input of model '{self.model_name}'")
            array = tensors.to_model(tensor.name, binding.datatype, tensor.data)
            if binding.model_dims is not None:
                try:
                    array = batching.reshape_batch(array, binding.dims, binding.model_dims, self.batching)
                except ValueError as exc:
                    raise InvalidArgumentError(f"input '{tensor.name}' cannot be reshaped: {exc}") from exc
            feed[tensor.name] = array
        return feed

    def _batch_key(self, feed: Feed) -> Hashable:
        """Requests with equal keys can be concatenated: same inputs, same non-batch shapes."""
        return tuple(
            (name, None if self._inputs[name].ragged else array.shape[1:])
            for name, array in sorted(feed.items())
        )

    def _batch_size(self, feed: Feed) -> int:
        for name, array in feed.items():
            if not self._inputs[name].ragged and array.ndim > 0:
                return int(array.shape[0])
        return 1

    def _output_names(self, requests: Sequence[InferRequest]) -> list[str]:
        """The outputs to compute: those requested, or all configured ones if any request wants all."""
        if any(not request.outputs for request in requests):
            return list(self._outputs)
        wanted = {output.name for request in requests for output in request.outputs or ()}
        return [name for name in self._outputs if name in wanted]

    def _run(self, requests: Sequence[InferRequest], feeds: Sequence[Feed]) -> list[ExecuteResult]:
        """One ``session.run`` for ``requests``; one result per request."""
        session = self._session
        if session is None:
            error = InternalError(f"model '{self.model_name}' instance is closed")
            return [error for _ in requests]
        names = self._output_names(requests)
        if len(feeds) == 1:
            feed = feeds[0]
        else:
            feed = {
                name: batching.concat_batch([f[name] for f in feeds], self._inputs[name].ragged)
                for name in feeds[0]
            }
        try:
            produced = session.run(names, feed, self._run_options)
        except Exception as exc:  # ORT's exception types share nothing narrower than Exception
            error = InternalError(str(exc))
            return [error for _ in requests]
        sizes = [self._batch_size(f) for f in feeds]
        try:
            per_request = [
                self._split(self._outputs[n], array, sizes) for n, array in zip(names, produced, strict=True)
            ]
        except ValueError as exc:
            error = InternalError(f"model '{self.model_name}': {exc}")
            return [error for _ in requests]
        return [
            self._response(request, names, [outputs[i] for outputs in per_request])
            for i, request in enumerate(requests)
        ]

    def _split(self, binding: Binding, array: Any, sizes: list[int]) -> list[tensors.Array]:
        array = tensors.from_model(binding.datatype, array)
        if binding.model_dims is not None:
            array = batching.reshape_batch(array, binding.model_dims, binding.dims, self.batching)
        if not self.batching:
            return [array]
        return batching.split_batch(array, sizes)

    def _response(
        self, request: InferRequest, names: list[str], arrays: list[tensors.Array]
    ) -> InferResponse:
        produced = dict(zip(names, arrays, strict=True))
        order = [o.name for o in request.outputs] if request.outputs else names
        outputs = [Tensor(n, self._outputs[n].datatype, produced[n]) for n in order if n in produced]
        return InferResponse(self.model_name, self.model_version, request.id, outputs)
