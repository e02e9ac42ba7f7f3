"""Which of a request's problems is reported: the one Triton 2.51 reports first (each expected message
below is Triton's answer to the same request, compared side by side with Python models of these
signatures).  Valid requests pass with their batch size."""

from __future__ import annotations

import numpy as np
import pytest
from naiad.core.errors import InvalidArgumentError
from naiad.core.request import InferRequest, RequestedOutput, Tensor
from naiad.core.signature import ModelSignature, TensorSpec

#: ``add_sub``: two required FP32 [4] inputs, no batching.
ADD_SUB = ModelSignature(
    "add_sub",
    0,
    (TensorSpec("INPUT0", "FP32", (4,)), TensorSpec("INPUT1", "FP32", (4,))),
    (TensorSpec("OUTPUT0", "FP32", (4,)), TensorSpec("OUTPUT1", "FP32", (4,))),
)
#: ``shaped``: batching (2), FP32 ``A`` [2,2], optional INT64 ``B`` [-1], BYTES ``S`` [1].
SHAPED = ModelSignature(
    "shaped",
    2,
    (
        TensorSpec("A", "FP32", (2, 2)),
        TensorSpec("B", "INT64", (-1,), optional=True),
        TensorSpec("S", "BYTES", (1,)),
    ),
    (TensorSpec("O", "FP32", (4,)),),
)
NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be "
    "prepended to each input shape. If you want to specify the full shape including the batch dim in "
    "your input dims config, try setting max_batch_size to zero. See the model configuration docs for "
    "more info on max_batch_size."
)
PREFIX = "[request id: <id_unknown>] "


def _tensor(name: str, datatype: str, shape: tuple[int, ...]) -> Tensor:
    dtype = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32}.get(datatype, object)
    return Tensor(name, datatype, np.zeros(shape, dtype=dtype))


def _request(model: str, *inputs: tuple[str, str, tuple[int, ...]], outputs: tuple[str, ...] = ()) -> InferRequest:
    asked = [RequestedOutput(name) for name in outputs] if outputs else None
    return InferRequest(model, inputs=[_tensor(*given) for given in inputs], outputs=asked)


def _refusal(signature: ModelSignature, request: InferRequest) -> str:
    with pytest.raises(InvalidArgumentError) as refused:
        signature.validate(request)
    return refused.value.message


def test_valid_requests_pass_with_their_batch_size() -> None:
    assert ADD_SUB.validate(_request("add_sub", ("INPUT0", "FP32", (4,)), ("INPUT1", "FP32", (4,)))) == 1
    shaped = _request("shaped", ("A", "FP32", (2, 2, 2)), ("S", "BYTES", (2, 1)), ("B", "INT64", (2, 3)))
    assert SHAPED.validate(shaped) == 2


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (  # an unknown output comes before the inputs' faults
            _request("shaped", ("A", "FP64", (1, 2, 2)), ("S", "BYTES", (1, 1)), outputs=("X",)),
            "unexpected inference output 'X' for model 'shaped'",
        ),
        (  # batch sizes come before shapes, the inputs taken in the reverse of the request's order
            _request("shaped", ("A", "FP32", (2, 2)), ("S", "BYTES", (1, 1))),
            PREFIX + "input 'A' batch size does not match other inputs for 'shaped'",
        ),
        (
            _request("shaped", ("A", "FP32", (1, 2, 2)), ("S", "BYTES", (1, 1)), ("B", "INT64", (2, 1))),
            PREFIX + "input 'S' batch size does not match other inputs for 'shaped'",
        ),
        (  # the batch size against the model's before a shape
            _request("shaped", ("A", "FP32", (3, 2, 2)), ("S", "BYTES", (3, 2))),
            PREFIX + "inference request batch-size must be <= 2 for 'shaped'",
        ),
        (
            _request("shaped", ("A", "FP32", (1, 4)), ("S", "BYTES", (1, 1))),
            PREFIX + "unexpected shape for input 'A' for model 'shaped'. Expected [-1,2,2], got [1,4]." + NOTE,
        ),
        (
            _request("shaped", ("A", "FP32", ()), ("S", "BYTES", (1, 1))),
            PREFIX + "input 'A' has no shape but model requires batch dimension for 'shaped'",
        ),
        (  # too many inputs: the count, with none missing printed as Triton prints it
            _request("add_sub", ("INPUT0", "FP32", (4,)), ("INPUT1", "FP32", (4,)), ("EXTRA", "FP32", (1,))),
            PREFIX + "expected 2 inputs but got 3 inputs for model 'add_sub'. Got input(s) "
            "['EXTRA','INPUT1','INPUT0'], but missing required input(s) ]. Please provide all required input(s).",
        ),
        (  # the right count with an unknown name: the name
            _request("add_sub", ("INPUT9", "FP32", (4,)), ("INPUT1", "FP32", (4,))),
            "unexpected inference input 'INPUT9' for model 'add_sub'",
        ),
        (  # a required input left out for an optional one (Triton would run the model without it)
            _request("shaped", ("A", "FP32", (1, 2, 2)), ("B", "INT64", (1, 1))),
            PREFIX + "expected number of inputs between 2 and 3 but got 2 inputs for model 'shaped'. Got "
            "input(s) ['B','A'], but missing required input(s) ['S']. Please provide all required input(s).",
        ),
        (  # datatypes and shapes in the reverse of the request's order
            _request("add_sub", ("INPUT0", "INT32", (4,)), ("INPUT1", "FP32", (3,))),
            PREFIX + "unexpected shape for input 'INPUT1' for model 'add_sub'. Expected [4], got [3]. ",
        ),
    ],
    ids=[
        "output-first",
        "batch-before-shape",
        "batch-reverse-order",
        "batch-over-max",
        "shape",
        "no-shape",
        "too-many",
        "unknown-input",
        "required-missing",
        "reverse-order",
    ],
)
def test_the_problem_reported_is_the_one_triton_reports_first(request_: InferRequest, message: str) -> None:
    signature = SHAPED if request_.model_name == "shaped" else ADD_SUB
    assert _refusal(signature, request_) == message
