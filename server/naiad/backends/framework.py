"""What the framework backends (ONNX Runtime, PyTorch, TensorRT) share: requests in, batched calls out.

Around its one framework call, every framework instance does the same work, and it is written here once
so the three backends cannot drift apart in batching or in the errors clients see:

* each request's inputs are looked up in the configuration, converted to the framework's form and given
  the config ``reshape``; a request that cannot be fed fails alone;
* requests that can share a call (a batching model, the same inputs with the same non-batch shapes) are
  grouped and concatenated along dim 0 with :mod:`naiad.backends.batching`;
* each group runs once, and its outputs are reshaped back and split by each request's batch size;
* a config's ``batch_input`` tensors are computed for each call and its ``batch_output`` tensors
  scattered back in the shapes of their source inputs (:mod:`naiad.backends.batch_io`);
* a failing call fails the requests of its group only and leaves the instance usable, as in Triton.

A backend subclasses :class:`FrameworkInstance` and fills in only what differs between frameworks:
converting one input (:meth:`~FrameworkInstance._convert_input`), the call itself
(:meth:`~FrameworkInstance._compute`) and what to free besides the model on close
(:meth:`~FrameworkInstance._release`).

Backends whose model file describes its tensors (ONNX, TensorRT plans) also share Triton's auto-complete
rules for batching and for the inputs and outputs a config leaves out (:func:`complete_batching`,
:func:`complete_io`), over any :class:`DescribedTensor`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from tritonclient.grpc import model_config_pb2 as mc

from naiad.backends import batching
from naiad.backends.base import ExecuteResult, InstanceContext
from naiad.backends.batch_io import BatchIO, Shape
from naiad.core import datatypes
from naiad.core.errors import InferenceServerError, InternalError, InvalidArgumentError, UnsupportedError
from naiad.core.request import InferRequest, InferResponse, Tensor

Array = batching.Array
#: Input name -> array: one request's inputs as the model takes them, or a group's joined along dim 0.
Feed = dict[str, Array]


@dataclass(frozen=True, slots=True)
class TensorBinding:
    """One configured tensor: ``dims`` as clients see it, ``model_dims`` as the model does.

    ``model_dims`` is the config ``reshape`` (or another shape the backend found the model wants);
    ``None`` means the model takes ``dims`` as they are.  Each backend's ``Binding`` is this record,
    extended with whatever that framework needs to locate the tensor in the model.
    """

    name: str
    datatype: str
    dims: tuple[int, ...]
    model_dims: tuple[int, ...] | None = None


#: The loaded framework model an instance runs (an ORT session, a torch program, a TensorRT engine).
ModelT = TypeVar("ModelT")
#: The backend's binding record, so hooks see its framework-specific fields with their types.
BindingT = TypeVar("BindingT", bound=TensorBinding)


class FrameworkInstance(ABC, Generic[ModelT, BindingT]):
    """A :class:`~naiad.backends.base.ModelInstance` that runs each group of requests as one model call.

    ``inputs`` and ``outputs`` are the configured tensors by name.  ``ragged`` names the inputs fed
    flattened and joined end to end (``allow_ragged_batch``): they do not constrain which requests
    batch together.  ``response_order`` is the order responses carry their outputs in, whatever order
    the config or the request names them in, as Triton's backends answer: by name by default (its ONNX
    Runtime and PyTorch backends keep a model's outputs in a ``std::map``), the engine's order for
    TensorRT (its backend walks the engine's tensors).
    """

    #: Prefix of the INTERNAL error an unexpected exception of the model call becomes (Triton's wording).
    execute_failure: ClassVar[str] = ""

    def __init__(
        self,
        context: InstanceContext,
        model: ModelT,
        inputs: dict[str, BindingT],
        outputs: dict[str, BindingT],
        ragged: frozenset[str] = frozenset(),
        response_order: Sequence[str] | None = None,
    ) -> None:
        self.model_name = context.model_name
        self.model_version = str(context.model_version)
        self.batching = context.config.max_batch_size > 0
        self._model: ModelT | None = model
        self._inputs = inputs
        self._outputs = outputs
        self._ragged = ragged
        order = sorted(outputs) if response_order is None else [n for n in response_order if n in outputs]
        self._response_order = tuple(order)
        self._output_list = list(outputs)
        self._batch_io = BatchIO.of(context.config)

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        """One result per request, in order, with one model call per group of batchable requests."""
        if len(requests) == 1:  # most executions without dynamic batching: no groups to form
            try:
                feed = self._feed(requests[0])
            except InferenceServerError as exc:
                return [exc]
            return self._run(requests, [feed])
        results: dict[int, ExecuteResult] = {}
        groups: dict[Hashable, list[tuple[int, Feed]]] = {}
        for index, request in enumerate(requests):
            try:
                feed = self._feed(request)
            except InferenceServerError as exc:
                results[index] = exc
                continue
            key: Hashable = index if not self.batching else _batch_key(feed, self._ragged)
            groups.setdefault(key, []).append((index, feed))
        for members in groups.values():
            chosen = [requests[index] for index, _ in members]
            for (index, _), result in zip(members, self._run(chosen, [f for _, f in members]), strict=True):
                results[index] = result
        return [results[index] for index in range(len(requests))]

    def close(self) -> None:
        """Drop the model now, so the framework frees its memory (device memory included), not at GC."""
        self._model = None
        self._release()

    @abstractmethod
    def _compute(self, model: ModelT, inputs: Feed, requests: Sequence[InferRequest]) -> dict[str, Array]:
        """Run ``model`` once on ``inputs`` (joined); return output name -> host array, as clients see it
        but for the config ``reshape``, which the caller undoes.

        ``requests`` are the group's, so that a framework able to compute only the outputs they ask for
        can (:meth:`_output_names`); one whose call produces every output anyway returns them all, since
        each response keeps only what its request asked for.  Raise
        :class:`InferenceServerError` to fail the group with that error; any other exception fails it
        as INTERNAL, prefixed with :attr:`execute_failure`.
        """

    def _convert_input(self, binding: BindingT, array: Array) -> Array:
        """One request's input in the form the framework takes; a conversion error fails that request.

        Converting per request, before requests are joined, is what lets a bad request fail alone.  The
        default feeds the array as received.
        """
        return array

    def _release(self) -> None:
        """Free what the instance holds besides the model on close; nothing by default."""

    def _feed(self, request: InferRequest) -> Feed:
        """The request's inputs as the model takes them (converted, reshaped), still unbatched."""
        feed: Feed = {}
        for tensor in request.inputs:
            binding = self._inputs.get(tensor.name)
            if binding is None:
                raise InternalError(f"input '{tensor.name}' is not an input of model '{self.model_name}'")
            array = self._convert_input(binding, tensor.data)
            if binding.model_dims is not None:
                try:
                    array = batching.reshape_batch(array, binding.dims, binding.model_dims, self.batching)
                except ValueError as exc:
                    raise InvalidArgumentError(f"input '{tensor.name}' cannot be reshaped: {exc}") from exc
            feed[tensor.name] = array
        return feed

    def _output_names(self, requests: Sequence[InferRequest]) -> list[str]:
        """The outputs to compute: those requested, or all configured ones if any request wants all
        (one list kept for every call, which callers must not change)."""
        for request in requests:  # (a loop, not ``any``: no generator per execution)
            if not request.outputs:
                return self._output_list
        wanted = {output.name for request in requests for output in request.outputs or ()}
        return [name for name in self._outputs if name in wanted]

    def _run(self, requests: Sequence[InferRequest], feeds: Sequence[Feed]) -> list[ExecuteResult]:
        """One model call for ``requests``; one result per request."""
        model = self._model
        if model is None:
            return _failed(requests, InternalError(f"model '{self.model_name}' instance is closed"))
        ragged = self._ragged
        joined = feeds[0]
        if len(feeds) > 1 or ragged:  # (a ragged input is flattened even alone)
            joined = {
                name: batching.concat_batch([feed[name] for feed in feeds], name in ragged) for name in joined
            }
        batch_io = self._batch_io
        shapes: dict[str, list[Shape]] = {}
        if batch_io is not None:
            shapes = {source: [_shape_of(r, source) for r in requests] for source in batch_io.sources()}
            joined = dict(joined)
            for batch_input in batch_io.inputs:
                value = batch_input.value(shapes[batch_input.source])
                joined.update(dict.fromkeys(batch_input.targets, value))
        try:
            produced = self._compute(model, joined, requests)
        except InferenceServerError as exc:
            return _failed(requests, exc)
        except Exception as exc:  # frameworks' errors share nothing narrower than Exception
            return _failed(requests, InternalError(f"{self.execute_failure}{exc}"))
        try:
            scattered = {}
            if batch_io is not None:
                for name, batch_output in batch_io.outputs.items():
                    if name in produced:
                        scattered[name] = batch_output.scatter(
                            produced.pop(name), shapes[batch_output.source]
                        )
            if not self.batching:  # one request, whose outputs are the call's, reshaped back
                outputs = self._outputs
                whole = {
                    name: array if outputs[name].model_dims is None else self._reshaped(outputs[name], array)
                    for name, array in produced.items()
                }
                whole.update((name, parts[0]) for name, parts in scattered.items())
                return [self._response(requests[0], whole)]
            sizes = [_batch_size(feed, ragged) for feed in feeds]
            split = {name: self._split(self._outputs[name], array, sizes) for name, array in produced.items()}
            split.update(scattered)
        except ValueError as exc:
            return _failed(requests, InternalError(f"model '{self.model_name}': {exc}"))
        return [
            self._response(request, {name: parts[i] for name, parts in split.items()})
            for i, request in enumerate(requests)
        ]

    def _split(self, binding: BindingT, array: Array, sizes: list[int]) -> list[Array]:
        """A batching group's output as clients see it (config ``reshape`` undone), one part per request."""
        if binding.model_dims is not None:
            array = self._reshaped(binding, array)
        return batching.split_batch(array, sizes)

    def _reshaped(self, binding: BindingT, array: Array) -> Array:
        """A group's output with the config ``reshape`` undone (``binding.model_dims`` is set)."""
        assert binding.model_dims is not None
        return batching.reshape_batch(array, binding.model_dims, binding.dims, self.batching)

    def _response(self, request: InferRequest, produced: dict[str, Array]) -> InferResponse:
        """The outputs the request asked for (all when it named none), in ``response_order``; each
        copied to where its response goes when the request offers that (``output_memory``): here,
        on the instance's thread, rather than on the engine's event loop."""
        wanted = {o.name for o in request.outputs} if request.outputs else None
        memory = request.output_memory
        outputs = []
        for name in self._response_order:
            if name in produced and (wanted is None or name in wanted):
                datatype = self._outputs[name].datatype
                array = produced[name]
                placed = memory.place(datatype, array) if memory is not None else None
                outputs.append(Tensor(name, datatype, array if placed is None else placed))
        return InferResponse(self.model_name, self.model_version, request.id, outputs)


def _batch_key(feed: Feed, ragged: frozenset[str]) -> Hashable:
    """Requests with equal keys can be concatenated: the same inputs with the same non-batch shapes.

    A function, not a method, and with a branch for models without ragged inputs, because it runs for
    every request.
    """
    if not ragged:
        return tuple((name, array.shape[1:]) for name, array in sorted(feed.items()))
    return tuple((name, None if name in ragged else array.shape[1:]) for name, array in sorted(feed.items()))


def _shape_of(request: InferRequest, name: str) -> Shape:
    """The shape the client gave the request's input ``name`` (``()`` when it sent none)."""
    for tensor in request.inputs:
        if tensor.name == name:
            return tuple(tensor.data.shape)
    return ()


def _batch_size(feed: Feed, ragged: frozenset[str]) -> int:
    """The request's batch size: dim 0 of its first non-ragged, non-scalar input, else of a ragged
    one (still unjoined here, with the batch dimension its client gave it)."""
    for name, array in feed.items():
        if array.ndim > 0 and name not in ragged:
            return int(array.shape[0])
    for array in feed.values():
        if array.ndim > 0:
            return int(array.shape[0])
    return 1


def _failed(requests: Sequence[InferRequest], error: InferenceServerError) -> list[ExecuteResult]:
    """``error`` as the result of every request of a group."""
    return [error for _ in requests]


class DescribedTensor(Protocol):
    """A tensor as a model file describes it; ``shape`` has -1 for variable dimensions."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def datatype(self) -> str | None:
        """The protocol datatype, or ``None`` when the server cannot carry this type."""
        ...

    @property
    def config_type(self) -> str:
        """The ``TYPE_*`` name of the tensor's type (the framework's own name when there is none)."""
        ...

    def can_batch(self) -> bool:
        """Whether dim 0 is variable, which is how Triton decides a model can batch."""
        ...


def complete_batching(
    config: mc.ModelConfig, tensors: Iterable[DescribedTensor], model_name: str, max_batch_size: int
) -> bool:
    """Triton's batching auto-complete: a model whose every tensor has a variable dim 0 batches.

    Such a model gets ``max_batch_size`` (the framework's default) when the config leaves it 0, and
    ``dynamic_batching {}`` when it batches and the config sets no scheduler; a model that cannot batch
    while the config sets ``max_batch_size`` fails with ``autofill failed``.  Whether
    ``max_batch_size`` was filled (backends say so in their words).
    """
    filled = False
    if all(tensor.can_batch() for tensor in tensors):
        if config.max_batch_size == 0:
            config.max_batch_size = max_batch_size
            filled = True
        has_scheduler = config.HasField("dynamic_batching") or config.HasField("sequence_batching")
        if config.max_batch_size > 1 and not has_scheduler:
            config.dynamic_batching.SetInParent()
    elif config.max_batch_size != 0:
        raise InvalidArgumentError(
            f"autofill failed for model '{model_name}': model does not support batching while "
            "non-zero max_batch_size is specified"
        )
    return filled


def complete_io(
    section: Any, tensors: Iterable[DescribedTensor], max_batch_size: int, model_name: str
) -> None:
    """Append ``tensors`` to a config's ``input`` or ``output`` ``section``, by Triton's rules.

    Dims drop dim 0 when the model batches; a tensor left with no dims becomes ``dims: [1]``, with
    ``reshape { shape: [] }`` when batching (Triton rejects an empty reshape without batching).
    """
    for tensor in tensors:
        datatype = tensor.datatype
        if datatype is None:
            raise UnsupportedError(
                f"autofill failed for model '{model_name}': tensor '{tensor.name}' has type "
                f"{tensor.config_type}, which this server cannot carry"
            )
        io = section.add()
        io.name = tensor.name
        io.data_type = mc.DataType.Value(datatypes.CONFIG_TYPE[datatype])
        dims = tensor.shape[1:] if max_batch_size > 0 else tensor.shape
        if dims:
            io.dims.extend(dims)
        else:
            io.dims.append(1)
            if max_batch_size > 0:
                io.reshape.SetInParent()
