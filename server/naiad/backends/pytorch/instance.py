"""One loaded torch model on one device, whose ``forward`` calls run the requests.

Grouping requests into batched calls, splitting outputs back and per-request errors come from
:mod:`naiad.backends.framework`; this module adds what is torch's own: BYTES as ``List[str]``,
arguments bound by position or by name, inference mode and the graph executor setting, and Triton's
checks and wording for what ``forward`` returns.  A failing ``forward`` fails the requests of that call
with Triton's ``PyTorch execute failure`` and leaves the instance usable.  GPU instances run on a CUDA
stream of their own, so two instances on one device overlap as two Triton instances do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from naiad.backends.base import ExecuteResult, InstanceContext
from naiad.backends.framework import Array, Feed, FrameworkInstance
from naiad.backends.pytorch import tensors
from naiad.backends.pytorch.bindings import Binding
from naiad.backends.pytorch.options import Options, apply_intra_op_threads
from naiad.backends.pytorch.program import Program
from naiad.core import datatypes
from naiad.core.errors import InternalError, InvalidArgumentError
from naiad.core.request import InferRequest

#: What ``forward`` returns for one output: a tensor, or a list of strings for BYTES.
Produced = torch.Tensor | list[str]


class PyTorchInstance(FrameworkInstance[Program, Binding]):
    """A :class:`~naiad.backends.base.ModelInstance` backed by one loaded :class:`Program`."""

    execute_failure = "PyTorch execute failure: "

    def __init__(
        self,
        context: InstanceContext,
        program: Program,
        device: torch.device,
        options: Options,
        inputs: dict[str, Binding],
        outputs: dict[str, Binding],
        closed: Callable[[], None] = lambda: None,
    ) -> None:
        """``closed`` is called once the instance closes (its load's count of instances)."""
        # ragged inputs reach ``forward`` flattened and joined end to end, as Triton's backend gives them
        ragged = frozenset(io.name for io in context.config.input if io.allow_ragged_batch)
        super().__init__(context, program, inputs, outputs, ragged)
        self._device = device
        self._options = options
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None  # type: ignore[no-untyped-call]
        self._closed: Callable[[], None] | None = closed

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        """Run ``requests`` with the process-wide intra-op thread count applied on this thread."""
        apply_intra_op_threads()
        return super().execute(requests)

    def _release(self) -> None:
        """Let go of the program (a shared one stays while another instance holds it) and hand a GPU
        instance's cached device memory back to CUDA."""
        closed, self._closed = self._closed, None
        if closed is not None:
            closed()
        if self._device.type == "cuda":
            torch.cuda.empty_cache()

    def _convert_input(self, binding: Binding, array: Array) -> Array:
        """BYTES decoded to ``str`` objects (later a ``List[str]``); tensors stay numpy until the call."""
        if binding.datatype == "BYTES":
            return tensors.to_strings(binding.name, array)
        return array

    def _compute(self, model: Program, inputs: Feed, requests: Sequence[InferRequest]) -> dict[str, Array]:
        """One ``forward`` call; every configured output is read and checked, as Triton does."""
        with self._running(model):
            values = {name: self._argument(name, array) for name, array in inputs.items()}
            produced = _outputs_of(self._call(model, values))
            return {name: self._array(binding, produced) for name, binding in self._outputs.items()}

    @contextlib.contextmanager
    def _running(self, program: Program) -> Iterator[None]:
        """Inference (or no-grad) mode, the graph executor setting and the instance's CUDA stream."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.inference_mode() if self._options.inference_mode else torch.no_grad())
            if program.scripted:
                stack.enter_context(torch.jit.optimized_execution(self._options.optimized_execution))  # type: ignore[attr-defined]
            if self._stream is not None:
                stack.enter_context(torch.cuda.stream(self._stream))
            yield

    def _argument(self, name: str, array: Array) -> Produced:
        if self._inputs[name].datatype == "BYTES":
            return [str(item) for item in array.reshape(-1)]
        return tensors.to_torch(array, self._device)

    def _call(self, program: Program, values: dict[str, Produced]) -> Any:
        if program.dict_input:
            return program.forward(values)
        ordered = sorted(values, key=lambda name: self._inputs[name].position)
        return program.forward(*(values[name] for name in ordered))

    def _array(self, binding: Binding, produced: list[Any]) -> Array:
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
