"""One engine on one GPU, and ``execute`` turning requests into ``execute_async_v3`` calls.

Requests that can share a call (a batching model, equal non-batch shapes) are concatenated with
:mod:`naiad.backends.batching`, the profile fitting the joined shapes is chosen, and one execution
context per profile (created on first use: each holds its own activation memory) runs the engine on
the instance's CUDA stream, so instances on one GPU overlap.  Device buffers are torch tensors: torch's
caching allocator reuses them from call to call.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch

from naiad.backends import batching
from naiad.backends.base import ExecuteResult, InstanceContext
from naiad.backends.pytorch import tensors
from naiad.backends.tensorrt.bindings import Binding
from naiad.backends.tensorrt.engine import Engine
from naiad.backends.tensorrt.profiles import choose_profile
from naiad.backends.tensorrt.tensors import EngineTensor
from naiad.core.errors import InferenceServerError, InternalError, InvalidArgumentError
from naiad.core.request import InferRequest, InferResponse, Tensor

Feed = dict[str, tensors.Array]


class TensorRTInstance:
    """A :class:`~naiad.backends.base.ModelInstance` backed by one deserialized engine."""

    def __init__(
        self,
        context: InstanceContext,
        engine: Engine,
        described: list[EngineTensor],
        profiles: list[int],
        inputs: dict[str, Binding],
        outputs: dict[str, Binding],
    ) -> None:
        self.model_name = context.model_name
        self.model_version = str(context.model_version)
        self.batching = context.config.max_batch_size > 0
        self._engine: Engine | None = engine
        self._device = torch.device("cuda", context.device_id)
        self._engine_inputs = [t for t in described if t.is_input]
        self._engine_outputs = [t for t in described if not t.is_input]
        self._profiles = profiles
        self._inputs = inputs
        self._outputs = outputs
        self._contexts: dict[int, Any] = {}
        self._stream = torch.cuda.Stream(self._device)

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        results: dict[int, ExecuteResult] = {}
        groups: dict[Hashable, list[tuple[int, Feed]]] = {}
        for index, request in enumerate(requests):
            try:
                feed = self._feed(request)
            except InferenceServerError as exc:
                results[index] = exc
                continue
            key: Hashable = index if not self.batching else _batch_key(feed)
            groups.setdefault(key, []).append((index, feed))
        for members in groups.values():
            chosen = [requests[index] for index, _ in members]
            for (index, _), result in zip(members, self._run(chosen, [f for _, f in members]), strict=True):
                results[index] = result
        return [results[index] for index in range(len(requests))]

    def close(self) -> None:
        """Free the contexts and the engine now (their device memory with them), not at GC."""
        self._contexts.clear()
        self._engine = None
        torch.cuda.empty_cache()

    def _feed(self, request: InferRequest) -> Feed:
        feed: Feed = {}
        for tensor in request.inputs:
            binding = self._inputs.get(tensor.name)
            if binding is None:
                raise InternalError(f"input '{tensor.name}' is not an input of model '{self.model_name}'")
            array = tensor.data
            if binding.model_dims is not None:
                try:
                    array = batching.reshape_batch(array, binding.dims, binding.model_dims, self.batching)
                except ValueError as exc:
                    raise InvalidArgumentError(f"input '{tensor.name}' cannot be reshaped: {exc}") from exc
            feed[tensor.name] = array
        return feed

    def _run(self, requests: Sequence[InferRequest], feeds: Sequence[Feed]) -> list[ExecuteResult]:
        """One engine execution for ``requests``; one result per request."""
        engine = self._engine
        if engine is None:
            return _failed(requests, InternalError(f"model '{self.model_name}' instance is closed"))
        joined = feeds[0]
        if len(feeds) > 1:
            joined = {name: batching.concat_batch([feed[name] for feed in feeds]) for name in joined}
        shapes = {name: tuple(array.shape) for name, array in joined.items()}
        profile = choose_profile(self._engine_inputs, self._profiles, shapes)
        if profile is None:
            return _failed(
                requests,
                InvalidArgumentError(
                    f"no optimization profile of model '{self.model_name}' among {self._profiles} accepts "
                    f"the input shapes {shapes}"
                ),
            )
        try:
            produced = self._execute(engine, profile, joined)
        except InferenceServerError as exc:
            return _failed(requests, exc)
        except Exception as exc:  # TensorRT's and torch's CUDA errors share nothing narrower
            return _failed(requests, InternalError(f"TensorRT execute failure: {exc}"))
        sizes = [_batch_size(feed) for feed in feeds]
        try:
            split = {name: self._split(self._outputs[name], array, sizes) for name, array in produced.items()}
        except ValueError as exc:
            return _failed(requests, InternalError(f"model '{self.model_name}': {exc}"))
        return [
            self._response(request, {name: parts[i] for name, parts in split.items()})
            for i, request in enumerate(requests)
        ]

    def _execute(self, engine: Engine, profile: int, joined: Feed) -> dict[str, tensors.Array]:
        """Bind every engine tensor, run on the instance stream, return the configured outputs."""
        with torch.cuda.device(self._device), torch.cuda.stream(self._stream):
            context = self._context(engine, profile)
            keep: list[torch.Tensor] = []  # input buffers must live until the stream has run
            for name, array in joined.items():
                device_tensor = tensors.to_torch(array, self._device).contiguous()
                keep.append(device_tensor)
                if not context.set_input_shape(name, tuple(array.shape)):
                    raise InvalidArgumentError(
                        f"TensorRT rejects shape {list(array.shape)} for input '{name}' of model "
                        f"'{self.model_name}' under optimization profile {profile}"
                    )
                context.set_tensor_address(name, device_tensor.data_ptr())
            results: dict[str, torch.Tensor] = {}
            for tensor in self._engine_outputs:
                shape = tuple(context.get_tensor_shape(tensor.name))
                if any(size < 0 for size in shape):
                    raise InternalError(
                        f"output '{tensor.name}' of model '{self.model_name}' has a data-dependent shape "
                        f"{list(shape)}, which this server does not support yet"
                    )
                datatype = tensor.datatype
                if datatype is None:
                    raise InternalError(
                        f"output '{tensor.name}' has type {tensor.trt_type}, which is unreadable"
                    )
                buffer = torch.empty(shape, dtype=tensors.TORCH_DTYPE[datatype], device=self._device)
                context.set_tensor_address(tensor.name, buffer.data_ptr())
                results[tensor.name] = buffer
            if not context.execute_async_v3(self._stream.cuda_stream):
                raise InternalError(
                    f"TensorRT failed to execute model '{self.model_name}': {engine.logger.last_error}"
                )
            host = {name: tensors.from_torch(results[name]) for name in self._outputs}
        return host

    def _context(self, engine: Engine, profile: int) -> Any:
        """The execution context bound to ``profile`` (created on first use)."""
        context = self._contexts.get(profile)
        if context is None:
            context = engine.engine.create_execution_context()
            stream = self._stream.cuda_stream
            if context is None or not context.set_optimization_profile_async(profile, stream):
                raise InternalError(
                    f"unable to create a TensorRT execution context for optimization profile {profile} of "
                    f"model '{self.model_name}': {engine.logger.last_error}"
                )
            self._contexts[profile] = context
        return context

    def _split(self, binding: Binding, array: tensors.Array, sizes: list[int]) -> list[tensors.Array]:
        if binding.model_dims is not None:
            array = batching.reshape_batch(array, binding.model_dims, binding.dims, self.batching)
        if not self.batching:
            return [array]
        return batching.split_batch(array, sizes)

    def _response(self, request: InferRequest, produced: dict[str, tensors.Array]) -> InferResponse:
        names = [o.name for o in request.outputs] if request.outputs else list(self._outputs)
        outputs = [Tensor(n, self._outputs[n].datatype, produced[n]) for n in names if n in produced]
        return InferResponse(self.model_name, self.model_version, request.id, outputs)


def _batch_key(feed: Feed) -> Hashable:
    return tuple((name, array.shape[1:]) for name, array in sorted(feed.items()))


def _batch_size(feed: Feed) -> int:
    for array in feed.values():
        if array.ndim > 0:
            return int(array.shape[0])
    return 1


def _failed(requests: Sequence[InferRequest], error: InferenceServerError) -> list[ExecuteResult]:
    return [error for _ in requests]
