"""One engine on one GPU, whose ``execute_async_v3`` calls run the requests.

Grouping requests into batched calls, splitting outputs back and per-request errors come from
:mod:`naiad.backends.framework`; this module adds what is TensorRT's own: the profile fitting the
joined shapes is chosen, and one execution context per profile (created on first use: each holds its
own activation memory) runs the engine on the instance's CUDA stream, so instances on one GPU overlap.
Device buffers are torch tensors: torch's caching allocator reuses them from call to call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from naiad.backends.base import InstanceContext
from naiad.backends.framework import Array, Feed, FrameworkInstance
from naiad.backends.pytorch import tensors
from naiad.backends.tensorrt.bindings import Binding
from naiad.backends.tensorrt.engine import Engine
from naiad.backends.tensorrt.profiles import choose_profile
from naiad.backends.tensorrt.tensors import EngineTensor
from naiad.core.errors import InternalError, InvalidArgumentError
from naiad.core.request import InferRequest


class TensorRTInstance(FrameworkInstance[Engine, Binding]):
    """A :class:`~naiad.backends.base.ModelInstance` backed by one deserialized engine."""

    execute_failure = "TensorRT execute failure: "

    def __init__(
        self,
        context: InstanceContext,
        engine: Engine,
        described: list[EngineTensor],
        profiles: list[int],
        inputs: dict[str, Binding],
        outputs: dict[str, Binding],
    ) -> None:
        engine_order = [t.name for t in described if not t.is_input]
        super().__init__(context, engine, inputs, outputs, response_order=engine_order)
        self._device = torch.device("cuda", context.device_id)
        self._engine_inputs = [t for t in described if t.is_input]
        self._engine_outputs = [t for t in described if not t.is_input]
        self._profiles = profiles
        self._contexts: dict[int, Any] = {}
        self._stream = torch.cuda.Stream(self._device)  # type: ignore[no-untyped-call]

    def _release(self) -> None:
        """Free the execution contexts (their device memory with them) and torch's cached blocks."""
        self._contexts.clear()
        torch.cuda.empty_cache()

    def _compute(self, model: Engine, inputs: Feed, requests: Sequence[InferRequest]) -> dict[str, Array]:
        """One execution under the profile that fits the joined shapes; every configured output."""
        shapes = {name: tuple(array.shape) for name, array in inputs.items()}
        profile = choose_profile(self._engine_inputs, self._profiles, shapes)
        if profile is None:
            raise InvalidArgumentError(
                f"no optimization profile of model '{self.model_name}' among {self._profiles} accepts "
                f"the input shapes {shapes}"
            )
        return self._execute(model, profile, inputs)

    def _execute(self, engine: Engine, profile: int, joined: Feed) -> dict[str, Array]:
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
