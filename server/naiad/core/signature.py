"""A model's tensor signature and the request checks Triton makes against it.

The repository builds a :class:`ModelSignature` from the normalized model configuration; the data plane
checks every request against it before anything reaches a scheduler, so backends only ever see inputs
of the declared names, datatypes and shapes.  Messages are Triton's, word for word, because clients and
their tests match on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from naiad.core.errors import InvalidArgumentError, RankError, request_prefix
from naiad.core.map_order import unordered_map_order
from naiad.core.request import InferRequest, PlainRequest

_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be "
    "prepended to each input shape. If you want to specify the full shape including the batch dim in "
    "your input dims config, try setting max_batch_size to zero. See the model configuration docs for "
    "more info on max_batch_size."
)


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One configured input or output.  ``dims`` excludes the batch dimension; -1 is any size."""

    name: str
    datatype: str
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None = None
    optional: bool = False
    is_shape_tensor: bool = False
    allow_ragged_batch: bool = False
    label_filename: str = ""


def _shape_text(shape: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _prefix(request: InferRequest | PlainRequest) -> str:
    return request_prefix(request.id)


def _matches(dims: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    if dims == shape:
        return True
    if len(dims) != len(shape):
        return False
    return all(d == -1 or d == s for d, s in zip(dims, shape, strict=True))


@dataclass(frozen=True, slots=True)
class ModelSignature:
    """What a model accepts and produces; ``max_batch_size`` 0 means the model does not batch."""

    name: str
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    #: Lookups by name and the required inputs, derived once: ``validate`` runs on every request.
    _inputs: dict[str, TensorSpec] = field(init=False, repr=False, compare=False)
    _outputs: dict[str, TensorSpec] = field(init=False, repr=False, compare=False)
    _required: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_inputs", {spec.name: spec for spec in self.inputs})
        object.__setattr__(self, "_outputs", {spec.name: spec for spec in self.outputs})
        object.__setattr__(self, "_required", tuple(s.name for s in self.inputs if not s.optional))

    def full_shape(self, spec: TensorSpec) -> list[int]:
        """The shape clients see in metadata: ``-1`` prepended when the model batches."""
        return ([-1] if self.max_batch_size > 0 else []) + list(spec.dims)

    def input_spec(self, name: str) -> TensorSpec | None:
        return self._inputs.get(name)

    def output_spec(self, name: str) -> TensorSpec | None:
        return self._outputs.get(name)

    @property
    def outputs_by_name(self) -> Mapping[str, TensorSpec]:
        return self._outputs

    def validate(self, request: InferRequest | PlainRequest) -> int:
        """Check ``request`` against the signature; return its batch size (1 when not batching).

        Raises :class:`InvalidArgumentError` with Triton's message for the problem Triton reports
        first.  Most requests are valid: they pass one loop over their inputs; a request refused
        there is checked again in Triton's order (:meth:`_first_problem`) for the error to report.
        """
        try:
            return self._validate(request)
        except InvalidArgumentError:
            self._first_problem(request)
            raise

    def _validate(self, request: InferRequest | PlainRequest) -> int:
        seen: dict[str, None] = {}  # (in the request's order)
        batch: int | None = None
        for tensor in request.inputs:
            if tensor.name in seen:
                raise InvalidArgumentError(
                    f"{_prefix(request)}input '{tensor.name}' already exists in request"
                )
            seen[tensor.name] = None
            shape = tensor.shape
            spec = self._check_input(request.id, tensor.name, tensor.datatype, shape)
            if self.max_batch_size > 0 and not spec.is_shape_tensor:
                if batch is None:
                    batch = shape[0]
                elif shape[0] != batch:
                    raise InvalidArgumentError(
                        f"{_prefix(request)}input '{tensor.name}' batch size does not match other "
                        f"inputs for '{self.name}'"
                    )
        required = self._required
        missing = [n for n in required if n not in seen] if len(seen) < len(self._inputs) else ()
        if missing:
            raise self._count_error(request, list(seen), missing)
        if batch is not None and batch > self.max_batch_size:
            raise InvalidArgumentError(
                f"{_prefix(request)}inference request batch-size must be <= {self.max_batch_size} "
                f"for '{self.name}'"
            )
        if request.outputs is not None:
            asked: set[str] = set()
            for output in request.outputs:
                if output.name in asked:
                    raise InvalidArgumentError(
                        f"{_prefix(request)}output '{output.name}' already exists in request"
                    )
                asked.add(output.name)
                if output.name not in self._outputs:
                    raise InvalidArgumentError(
                        f"unexpected inference output '{output.name}' for model '{self.name}'"
                    )
        return batch if batch is not None else 1

    def _first_problem(self, request: InferRequest | PlainRequest) -> None:
        """Raise the error Triton reports first for a request with problems (compared side by side
        with Triton 2.51): repeated names as its frontends add inputs, then outputs; then its core's
        ``Normalize``: unknown outputs, the input count, each input's name and batch size, the batch
        size against the model's, each input's datatype and shape, the inputs in its map's order
        (:mod:`naiad.core.map_order`).  A required input left out while optional ones make the count is
        refused too (after the names), where Triton runs the model without it."""
        names: dict[str, None] = {}
        for tensor in request.inputs:
            if tensor.name in names:
                raise InvalidArgumentError(
                    f"{_prefix(request)}input '{tensor.name}' already exists in request"
                )
            names[tensor.name] = None
        outputs = request.outputs or ()
        asked: set[str] = set()
        for output in outputs:
            if output.name in asked:
                raise InvalidArgumentError(
                    f"{_prefix(request)}output '{output.name}' already exists in request"
                )
            asked.add(output.name)
        for output in outputs:
            if output.name not in self._outputs:
                raise InvalidArgumentError(
                    f"unexpected inference output '{output.name}' for model '{self.name}'"
                )
        missing = [name for name in self._required if name not in names]
        if len(names) < len(self._required) or len(names) > len(self._inputs):
            raise self._count_error(request, list(names), missing)
        by_name = {tensor.name: tensor for tensor in request.inputs}
        inputs = [by_name[name] for name in unordered_map_order(list(by_name))]
        batch = 0
        for tensor in inputs:
            spec = self._inputs.get(tensor.name)
            if spec is None:
                raise InvalidArgumentError(
                    f"unexpected inference input '{tensor.name}' for model '{self.name}'"
                )
            if self.max_batch_size == 0 or spec.is_shape_tensor:
                continue
            if not tensor.shape:
                raise InvalidArgumentError(
                    f"{_prefix(request)}input '{tensor.name}' has no shape but model requires batch "
                    f"dimension for '{self.name}'"
                )
            if batch == 0:  # (as Triton's: a first input of batch 0 sets none)
                batch = tensor.shape[0]
            elif tensor.shape[0] != batch:
                raise InvalidArgumentError(
                    f"{_prefix(request)}input '{tensor.name}' batch size does not match other inputs "
                    f"for '{self.name}'"
                )
        if missing:  # (optional inputs given instead: Triton would run the model without it)
            raise self._count_error(request, list(names), missing)
        if batch > self.max_batch_size:
            raise InvalidArgumentError(
                f"{_prefix(request)}inference request batch-size must be <= {self.max_batch_size} "
                f"for '{self.name}'"
            )
        for tensor in inputs:
            self._check_input(request.id, tensor.name, tensor.datatype, tensor.shape)

    def _count_error(
        self, request: InferRequest | PlainRequest, given: list[str], missing: list[str] | tuple[()]
    ) -> InvalidArgumentError:
        """Triton's input-count refusal: no space after a comma; the inputs given in its map's
        order; and, as Triton prints an empty list of missing ones (too many inputs given), a lone
        ``]``."""
        required = self._required
        got = ",".join(f"'{name}'" for name in unordered_map_order(given))
        want = "[" + ",".join(f"'{n}'" for n in missing) + "]" if missing else "]"
        if len(required) == len(self._inputs):
            expected = f"{len(required)} inputs"
        else:  # (Triton's words when some inputs are optional)
            expected = f"number of inputs between {len(required)} and {len(self._inputs)}"
        return InvalidArgumentError(
            f"{_prefix(request)}expected {expected} but got {len(request.inputs)} inputs for model "
            f"'{self.name}'. Got input(s) [{got}], but missing required input(s) {want}. Please provide "
            "all required input(s)."
        )

    def refusal(self, error: RankError) -> InvalidArgumentError:
        """Triton's answer to an input a codec could not hold (too many dimensions): its name, datatype
        or shape error for this model, as :meth:`validate` words them."""
        try:
            self._check_input(error.request_id, error.name, error.datatype, error.shape)
        except InvalidArgumentError as refused:
            return refused
        return error

    def _check_input(self, request_id: str, name: str, datatype: str, shape: tuple[int, ...]) -> TensorSpec:
        """One input's name, datatype and shape against the configuration; its spec when accepted."""
        spec = self._inputs.get(name)
        if spec is None:
            raise InvalidArgumentError(f"unexpected inference input '{name}' for model '{self.name}'")
        if datatype != spec.datatype:
            raise InvalidArgumentError(
                f"{request_prefix(request_id)}inference input '{name}' data-type is '{datatype}', but model "
                f"'{self.name}' expects '{spec.datatype}'"
            )
        if self.max_batch_size > 0 and not spec.is_shape_tensor:
            if len(shape) != len(spec.dims) + 1 or shape[0] < 1 or not _matches(spec.dims, shape[1:]):
                raise InvalidArgumentError(
                    f"{request_prefix(request_id)}unexpected shape for input '{name}' for model "
                    f"'{self.name}'. Expected {_shape_text(self.full_shape(spec))}, got "
                    f"{_shape_text(shape)}. {_BATCH_NOTE}"
                )
        elif not _matches(spec.dims, shape):
            raise InvalidArgumentError(
                f"{request_prefix(request_id)}unexpected shape for input '{name}' for model "
                f"'{self.name}'. Expected {_shape_text(spec.dims)}, got {_shape_text(shape)}. "
            )
        return spec
