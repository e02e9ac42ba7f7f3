"""One loaded torch model on one device, and ``execute`` turning requests into ``forward`` calls.

Requests that can share a call (a batching model, equal non-batch shapes) are concatenated along dim 0
with :mod:`naiad.backends.batching` and run once; outputs are split back by each request's batch size.
A request whose inputs cannot be converted fails alone; a failing ``forward`` fails the requests of that
call with Triton's ``PyTorch execute failure`` and leaves the instance usable.  GPU instances run on a
CUDA stream of their own, so two instances on one device overlap as two Triton instances do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator, Sequence
from typing import Any

import torch

from naiad.backends import batching
from naiad.backends.base import ExecuteResult, InstanceContext
from naiad.backends.pytorch import tensors
from naiad.backends.pytorch.bindings import Binding
from naiad.backends.pytorch.options import Options, apply_intra_op_threads
from naiad.backends.pytorch.program import Program
from naiad.core import datatypes
from naiad.core.errors import InferenceServerError, InternalError, InvalidArgumentError
from naiad.core.request import InferRequest, InferResponse, Tensor

Feed = dict[str, tensors.Array]
#: What ``forward`` returns for one output: a tensor, or a list of strings for BYTES.
Produced = torch.Tensor | list[str]


class PyTorchInstance:
    """A :class:`~naiad.backends.base.ModelInstance` backed by one loaded :class:`Program`."""

    def __init__(
        self,
        context: InstanceContext,
        program: Program,
        device: torch.device,
        options: Options,
        inputs: dict[str, Binding],
        outputs: dict[str, Binding],
    ) -> None:
        self.model_name = context.model_name
        self.model_version = str(context.model_version)
        self.batching = context.config.max_batch_size > 0
        self._program: Program | None = program
        self._device = device
        self._options = options
        self._inputs = inputs
        self._outputs = outputs
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        apply_intra_op_threads()
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
        """Drop the model now, and hand a GPU instance's cached device memory back to CUDA."""
        self._program = None
        if self._device.type == "cuda":
            torch.cuda.empty_cache()

    def _feed(self, request: InferRequest) -> Feed:
        """The request's inputs shaped as the model takes them (config ``reshape``), still unbatched."""
        feed: Feed = {}
        for tensor in request.inputs:
            binding = self._inputs.get(tensor.name)
            if binding is None:
                raise InternalError(f"input '{tensor.name}' is not an input of model '{self.model_name}'")
            array = tensor.data
            if binding.datatype == "BYTES":
                array = tensors.to_strings(tensor.name, array)
            if binding.model_dims is not None:
                try:
                    array = batching.reshape_batch(array, binding.dims, binding.model_dims, self.batching)
                except ValueError as exc:
                    raise InvalidArgumentError(f"input '{tensor.name}' cannot be reshaped: {exc}") from exc
            feed[tensor.name] = array
        return feed

    def _run(self, requests: Sequence[InferRequest], feeds: Sequence[Feed]) -> list[ExecuteResult]:
        """One ``forward`` call for ``requests``; one result per request."""
        program = self._program
        if program is None:
            return _failed(requests, InternalError(f"model '{self.model_name}' instance is closed"))
        joined = feeds[0]
        if len(feeds) > 1:
            joined = {name: batching.concat_batch([feed[name] for feed in feeds]) for name in joined}
        try:
            with self._running(program):
                values = {name: self._argument(name, array) for name, array in joined.items()}
                returned = self._call(program, values)
                produced = _outputs_of(returned)
                arrays = {name: self._array(binding, produced) for name, binding in self._outputs.items()}
        except InferenceServerError as exc:
            return _failed(requests, exc)
        except Exception as exc:  # torch raises RuntimeError, TorchScript's own errors, and more
            return _failed(requests, InternalError(f"PyTorch execute failure: {exc}"))
        sizes = [_batch_size(feed) for feed in feeds]
        try:
            split = {name: self._split(self._outputs[name], array, sizes) for name, array in arrays.items()}
        except ValueError as exc:
            return _failed(requests, InternalError(f"model '{self.model_name}': {exc}"))
        return [
            self._response(request, {name: parts[i] for name, parts in split.items()})
            for i, request in enumerate(requests)
        ]

    @contextlib.contextmanager
    def _running(self, program: Program) -> Iterator[None]:
        """Inference (or no-grad) mode, the graph executor setting and the instance's CUDA stream."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.inference_mode() if self._options.inference_mode else torch.no_grad())
            if program.scripted:
                stack.enter_context(torch.jit.optimized_execution(self._options.optimized_execution))
            if self._stream is not None:
                stack.enter_context(torch.cuda.stream(self._stream))
            yield

    def _argument(self, name: str, array: tensors.Array) -> Produced:
        if self._inputs[name].datatype == "BYTES":
            return [str(item) for item in array.reshape(-1)]
        return tensors.to_torch(array, self._device)

    def _call(self, program: Program, values: dict[str, Produced]) -> Any:
        if program.dict_input:
            return program.forward(values)
        ordered = sorted(values, key=lambda name: self._inputs[name].position)
        return program.forward(*(values[name] for name in ordered))

    def _array(self, binding: Binding, produced: list[Any]) -> tensors.Array:
        """The output at ``binding.position`` as a host array, checked against the configuration."""
        if binding.position >= len(produced):
            raise InvalidArgumentError(
                f"The output {binding.name} in the model configuration refers to an output index which "
                f"doesn't exist. This model has {len(produced)} outputs"
            )
        value = produced[binding.position]
        if isinstance(value, list):
            if binding.datatype != "BYTES":
                raise _type_mismatch(binding, "TYPE_STRING")
            return tensors.from_strings(value)
        provided = tensors.PROTOCOL_TYPE.get(value.dtype)
        if provided != binding.datatype:
            raise _type_mismatch(binding, datatypes.CONFIG_TYPE[provided] if provided else str(value.dtype))
        if value.dim() == 0:
            raise InvalidArgumentError(f"output '{binding.name}' is a scalar which is not supported.")
        return tensors.from_torch(value)

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


def _outputs_of(returned: Any) -> list[Any]:
    """``forward``'s result as a list of outputs, accepting what Triton accepts."""
    if isinstance(returned, torch.Tensor):
        return [returned]
    if isinstance(returned, list):
        if all(isinstance(item, str) for item in returned):
            return [returned]
        raise InternalError(
            "PyTorch execute failure: output must be of type Tensor or List[str], received a list of "
            f"{', '.join(sorted({type(item).__name__ for item in returned}))}"
        )
    if isinstance(returned, tuple):
        for index, item in enumerate(returned):
            if not isinstance(item, torch.Tensor) and not (
                isinstance(item, list) and all(isinstance(s, str) for s in item)
            ):
                raise InternalError(
                    f"PyTorch execute failure: output at index {index} must be of type Tensor or List[str], "
                    f"received {type(item).__name__}"
                )
        return list(returned)
    raise InternalError(
        "PyTorch execute failure: output must be of type Tensor, List[str] or Tuple containing one of these "
        "two types. It should not be a List / Dictionary of Tensors or a Scalar"
    )


def _type_mismatch(binding: Binding, provided: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"configuration expects datatype {datatypes.CONFIG_TYPE[binding.datatype]} for output "
        f"'{binding.name}', model provides {provided}"
    )


def _batch_key(feed: Feed) -> Hashable:
    """Requests with equal keys can be concatenated: the same inputs with the same non-batch shapes."""
    return tuple((name, array.shape[1:]) for name, array in sorted(feed.items()))


def _batch_size(feed: Feed) -> int:
    for array in feed.values():
        if array.ndim > 0:
            return int(array.shape[0])
    return 1


def _failed(requests: Sequence[InferRequest], error: InferenceServerError) -> list[ExecuteResult]:
    return [error for _ in requests]
