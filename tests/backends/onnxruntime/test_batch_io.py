"""Batch inputs and batch outputs (``batch_input``, ``batch_output``) on real ONNX models: the backend
computes the batch inputs of each call from its requests' ragged inputs and scatters a batch output
back in the shape of each request's source input; requests batched by a real server get the values
of the batch they ran in.  The kinds' arithmetic is checked on its own first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from naiad.backends.batch_io import BatchInput, BatchOutput
from naiad.core.errors import InvalidArgumentError
from naiad.core.request import InferResponse
from naiad.repository.config import normalize, read_config
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

from tests.backends.onnxruntime.models import LoadInstance, request, tensor_info, write_model
from tests.scheduling.models import infer_body
from tests.support.http import infer_concurrently
from tests.support.server import ServerProcess

KIND = mc.BatchInput.Kind

#: A model fed one ragged input: ``DOUBLED`` is it times two (scattered back per request); ``COUNTS``,
#: ``TOTALS`` and ``ITEMS`` are three batch inputs, reshaped to one row per batch item.
CONFIG = """
max_batch_size: 8
input [ { name: "RAGGED" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
output [
  { name: "DOUBLED" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "COUNTS" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "TOTALS" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "ITEMS" data_type: TYPE_INT32 dims: [ 1 ] }
]
batch_input [
  { kind: BATCH_ELEMENT_COUNT target_name: "COUNT" data_type: TYPE_INT32 source_input: "RAGGED" },
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "TOTAL" data_type: TYPE_FP32 source_input: "RAGGED" },
  { kind: BATCH_ITEM_SHAPE target_name: "ITEM" data_type: TYPE_INT32 source_input: "RAGGED" }
]
batch_output [ { target_name: "DOUBLED" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "RAGGED" } ]
"""


def ragged_model(root: Path, extra: str = "") -> Path:
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    column = helper.make_tensor("column", TensorProto.INT64, [2], [-1, 1])
    nodes = [
        helper.make_node("Constant", [], ["two"], value=two),
        helper.make_node("Constant", [], ["column"], value=column),
        helper.make_node("Mul", ["RAGGED", "two"], ["DOUBLED"]),
        helper.make_node("Reshape", ["COUNT", "column"], ["COUNTS"]),
        helper.make_node("Reshape", ["TOTAL", "column"], ["TOTALS"]),
        helper.make_node("Identity", ["ITEM"], ["ITEMS"]),
    ]
    graph_inputs = [
        tensor_info("RAGGED", TensorProto.FLOAT, ["n"]),
        tensor_info("COUNT", TensorProto.INT32, ["r"]),
        tensor_info("TOTAL", TensorProto.FLOAT, ["r"]),
        tensor_info("ITEM", TensorProto.INT32, ["b", 1]),
    ]
    graph_outputs = [
        tensor_info("DOUBLED", TensorProto.FLOAT, ["n"]),
        tensor_info("COUNTS", TensorProto.INT32, ["r", 1]),
        tensor_info("TOTALS", TensorProto.FLOAT, ["r", 1]),
        tensor_info("ITEMS", TensorProto.INT32, ["b", 1]),
    ]
    return write_model(root, "ragged", nodes, graph_inputs, graph_outputs, CONFIG + extra)


def test_each_kind_holds_what_triton_gives_a_batch() -> None:
    """Two requests: one of batch 2 with items of shape [3, 1], one of batch 1 with [2, 2] (Triton's
    own example for the item shapes)."""
    shapes = [(2, 3, 1), (1, 2, 2)]

    def value(kind: int) -> list[object]:
        return BatchInput(kind, ("T",), np.int32, "S").value(shapes).tolist()

    assert value(KIND.BATCH_ELEMENT_COUNT) == [6, 4]
    assert value(KIND.BATCH_ACCUMULATED_ELEMENT_COUNT) == [6, 10]
    assert value(KIND.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO) == [0, 6, 10]
    assert np.shape(value(KIND.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE)) == (6,)
    assert value(KIND.BATCH_ITEM_SHAPE) == [[3, 1], [3, 1], [2, 2]]
    assert value(KIND.BATCH_ITEM_SHAPE_FLATTEN) == [3, 1, 3, 1, 2, 2]
    assert BatchInput(KIND.BATCH_ELEMENT_COUNT, ("T",), np.float32, "S").value(shapes).dtype == np.float32


def test_a_batch_output_is_cut_in_its_source_inputs_shapes() -> None:
    scatter = BatchOutput("OUT", "IN", (-1, -1, 2)).scatter
    parts = scatter(np.arange(14), [(1, 3, 2), (2, 2, 2)])
    assert [p.shape for p in parts] == [(1, 3, 2), (2, 2, 2)]
    assert parts[1].reshape(-1).tolist() == list(range(6, 14))
    with pytest.raises(ValueError, match="has 13 elements, fewer than"):
        scatter(np.arange(13), [(1, 3, 2), (2, 2, 2)])


def test_one_call_computes_the_batch_inputs_and_scatters_the_output(
    tmp_path: Path, instances: LoadInstance
) -> None:
    instance = instances(ragged_model(tmp_path))
    sizes = (2, 4, 1)
    requests = [request("ragged", {"RAGGED": np.full((1, n), n, np.float32)}) for n in sizes]
    results = instance.execute(requests)
    for n, result in zip(sizes, results, strict=True):
        assert isinstance(result, InferResponse), result
        outputs = {tensor.name: tensor.data for tensor in result.outputs}
        np.testing.assert_array_equal(outputs["DOUBLED"], np.full((1, n), 2 * n, np.float32))
        assert outputs["COUNTS"].tolist() == [[n]]
        assert outputs["ITEMS"].tolist() == [[n]]
    totals = [
        {t.name: t.data for t in r.outputs}["TOTALS"].tolist()
        for r in results
        if isinstance(r, InferResponse)
    ]
    assert totals == [[[2.0]], [[6.0]], [[7.0]]]


def test_a_lone_request_gets_its_batch_inputs_too(tmp_path: Path, instances: LoadInstance) -> None:
    instance = instances(ragged_model(tmp_path))
    [result] = instance.execute([request("ragged", {"RAGGED": np.ones((1, 3), np.float32)})])
    assert isinstance(result, InferResponse), result
    outputs = {tensor.name: tensor.data.tolist() for tensor in result.outputs}
    assert outputs == {"COUNTS": [[3]], "DOUBLED": [[2.0, 2.0, 2.0]], "ITEMS": [[3]], "TOTALS": [[3.0]]}


def test_requests_a_server_batches_share_their_batch_inputs(tmp_path: Path) -> None:
    """Three ragged requests of different lengths, held until all three queued (Triton's start delay),
    run as one batch: each gets its own doubled elements and the batch's running totals."""
    ragged_model(tmp_path, "dynamic_batching { }\n")
    sizes = (2, 4, 1)
    bodies = [
        infer_body(f"r{n}", rows=1, value=n) | {"inputs": [
            {"name": "RAGGED", "datatype": "FP32", "shape": [1, n], "data": [float(n)] * n}
        ]}
        for n in sizes
    ]  # fmt: skip
    with ServerProcess([tmp_path], env={"TRITONSERVER_DELAY_SCHEDULER": "3"}) as server:
        answers = infer_concurrently(server.http_url, "ragged", bodies)
    assert [a["DOUBLED"] for a in answers] == [[2.0 * n] * n for n in sizes]
    assert [a["COUNTS"] for a in answers] == [[2], [4], [1]]
    # one batch, in the order the requests arrived: its running totals end at 2 + 4 + 1
    in_batch_order = sorted(answers, key=lambda a: a["TOTALS"][0])
    counts = [a["COUNTS"][0] for a in in_batch_order]
    assert (
        [a["TOTALS"][0] for a in in_batch_order] == np.cumsum(counts).tolist() == [*np.cumsum(counts)[:2], 7]
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "C" data_type: TYPE_INT32 source_input: "NONE" } ]',
         "unknown source input name 'NONE'"),
        ('batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "C" data_type: TYPE_INT64 source_input: "RAGGED" } ]',
         "batch input data type must be TYPE_INT32 or TYPE_FP32"),
        ('batch_input [ { kind: BATCH_ITEM_SHAPE target_name: "C" data_type: TYPE_INT32 } ]',
         "batch input kind 'BATCH_ITEM_SHAPE' expects 1 source input, got 0"),
        ('batch_output [ { target_name: "NONE" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "RAGGED" } ]',
         "unknown target output name 'NONE'"),
        ('batch_output [ { target_name: ["DOUBLED", "DOUBLED"] source_input: "RAGGED" } ]',
         "target output name 'DOUBLED' can only be specified once"),
    ],
)  # fmt: skip
def test_batch_io_the_config_gets_wrong_fails_to_load_in_tritons_words(
    tmp_path: Path, entry: str, message: str
) -> None:
    model_dir = tmp_path / "ragged"
    model_dir.mkdir()
    (model_dir / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "RAGGED" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]\n'
        'output [ { name: "DOUBLED" data_type: TYPE_FP32 dims: [ -1 ] } ]\n' + entry
    )
    config = read_config(model_dir)
    with pytest.raises(InvalidArgumentError) as error:
        normalize(config, "ragged")
    assert str(error.value) == f"{message} for ragged"
