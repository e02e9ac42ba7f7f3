"""Request inputs from perf_analyzer's --input-data JSON, random/zero data and --shape (no server)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from naiad.tools.perf.inputs import DataOptions, InputDataError, build_streams, parse_shapes, split_bytes
from naiad.tools.perf.model import ModelInfo, TensorSpec


def _model(*inputs: TensorSpec, max_batch_size: int = 0, sequence: bool = False) -> ModelInfo:
    return ModelInfo("m", "", inputs, (TensorSpec("OUT", "FP32", (4,)),), max_batch_size, False, sequence,
                     False, False)


def _write(tmp_path: Path, document: object) -> str:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(document))
    return str(path)


def test_json_lists_b64_and_content_with_shape(tmp_path: Path) -> None:
    info = _model(TensorSpec("A", "INT32", (4,)), TensorSpec("B", "FP32", (-1,)))
    raw = np.array([1.5, 2.5], dtype=np.float32).tobytes()
    document = {"data": [
        {"A": [1, 2, 3, 4], "B": {"content": [1, 2, 3], "shape": [3]}},
        {"A": {"b64": base64.b64encode(np.arange(4, dtype=np.int32).tobytes()).decode()},
         "B": {"content": {"b64": base64.b64encode(raw).decode()}, "shape": [2]}},
    ]}
    [stream] = build_streams(info, DataOptions(_write(tmp_path, document), 1, {}))
    first, second = stream
    assert np.frombuffer(first[0].raw, np.int32).tolist() == [1, 2, 3, 4]
    assert first[1].shape == (3,) and first[1].json_data() == [1.0, 2.0, 3.0]
    assert np.frombuffer(second[0].raw, np.int32).tolist() == [0, 1, 2, 3]
    assert second[1].shape == (2,) and second[1].json_data() == [1.5, 2.5]


def test_batch_repeats_each_step_and_prepends_the_batch_dimension(tmp_path: Path) -> None:
    info = _model(TensorSpec("S", "BYTES", (2,)), max_batch_size=8)
    [[step]] = build_streams(info, DataOptions(_write(tmp_path, {"data": [{"S": ["ab", "c"]}]}), 3, {}))
    assert step[0].shape == (3, 2)
    assert split_bytes(step[0].raw) == [b"ab", b"c"] * 3


def test_sequence_streams_stay_apart(tmp_path: Path) -> None:
    info = _model(TensorSpec("X", "INT32", (1,)), sequence=True)
    document = {"data": [[{"X": [1]}, {"X": [2]}], [{"X": [7]}]]}
    streams = build_streams(info, DataOptions(_write(tmp_path, document), 1, {}))
    assert [[np.frombuffer(s[0].raw, np.int32)[0] for s in stream] for stream in streams] == [[1, 2], [7]]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"data": [{"A": [1, 2, 3]}]}, "input A: 3 elements given, shape [4] needs 4"),
        ({"data": [{"B": [1, 2, 3, 4]}]}, "a step has no data for input A"),
        ({"data": []}, 'expected {"data": [...]} with at least one entry'),
        ({"data": [{"A": {"b64": "***"}}]}, "input A: 'b64' is not valid base64"),
    ],
)
def test_bad_json_names_the_problem(tmp_path: Path, document: object, message: str) -> None:
    info = _model(TensorSpec("A", "INT32", (4,)))
    with pytest.raises(InputDataError, match=message.replace("[", r"\[").replace("]", r"\]").replace("{", r"\{")):
        build_streams(info, DataOptions(_write(tmp_path, document), 1, {}))


def test_dynamic_dimension_needs_a_shape() -> None:
    info = _model(TensorSpec("A", "FP32", (-1, 3)))
    with pytest.raises(InputDataError, match="input A contains dynamic shape"):
        build_streams(info, DataOptions("random", 1, {}))
    [[step]] = build_streams(info, DataOptions("zero", 1, parse_shapes(["A:2,3"])))
    assert step[0].shape == (2, 3) and step[0].raw == bytes(24)


def test_batch_limits() -> None:
    with pytest.raises(InputDataError, match="does not support batching"):
        build_streams(_model(TensorSpec("A", "FP32", (1,))), DataOptions("random", 2, {}))
    with pytest.raises(InputDataError, match="larger than model m's max_batch_size 4"):
        build_streams(_model(TensorSpec("A", "FP32", (1,)), max_batch_size=4), DataOptions("random", 5, {}))


@pytest.mark.parametrize("text", ["A", "A:", "A:x", "A:-1", ":3"])
def test_malformed_shape_flag(text: str) -> None:
    with pytest.raises(InputDataError, match="expected NAME:d1,d2"):
        parse_shapes([text])
