"""Triton's own example ONNX models load unchanged and compute what Triton computes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from naiad.core.request import InferResponse

from tests.backends.onnxruntime.models import LoadInstance, as_bytes, load_config, request


def outputs(result: object) -> dict[str, np.ndarray[Any, Any]]:
    assert isinstance(result, InferResponse), result
    return {tensor.name: tensor.data for tensor in result.outputs}


@pytest.mark.parametrize(
    "name", ["simple", "simple_int8", "simple_string", "simple_sequence", "simple_dyna_sequence"]
)
def test_every_example_loads(triton_examples: Path, instances: LoadInstance, name: str) -> None:
    config = load_config(triton_examples / name)
    assert (config.backend, config.platform, config.max_batch_size) == ("onnxruntime", "onnxruntime_onnx", 8)
    instances(triton_examples / name)


@pytest.mark.parametrize(("name", "dtype"), [("simple", np.int32), ("simple_int8", np.int8)])
def test_simple_sum_and_difference(
    triton_examples: Path, instances: LoadInstance, name: str, dtype: type[np.generic]
) -> None:
    a = np.arange(16, dtype=dtype).reshape(1, 16)
    b = np.ones((1, 16), dtype=dtype)
    got = outputs(instances(triton_examples / name).execute([request(name, {"INPUT0": a, "INPUT1": b})])[0])
    np.testing.assert_array_equal(got["OUTPUT0"], a + b)
    np.testing.assert_array_equal(got["OUTPUT1"], a - b)
    assert got["OUTPUT0"].dtype == dtype


def test_simple_string(triton_examples: Path, instances: LoadInstance) -> None:
    a = np.arange(16).reshape(1, 16)
    b = np.ones((1, 16), dtype=int)
    inputs = {"INPUT0": as_bytes(a), "INPUT1": as_bytes(b)}
    got = outputs(instances(triton_examples / "simple_string").execute([request("simple_string", inputs)])[0])
    np.testing.assert_array_equal(got["OUTPUT0"], as_bytes(a + b))
    np.testing.assert_array_equal(got["OUTPUT1"], as_bytes(a - b))


def test_simple_sequence_with_controls_fed_by_hand(triton_examples: Path, instances: LoadInstance) -> None:
    """``OUTPUT = READY * (INPUT + START)``; the sequence batcher will feed START/READY later."""
    column = np.array([[5], [7]], dtype=np.int32)
    inputs = {"INPUT": column, "START": np.array([[1], [0]], np.int32), "READY": np.ones((2, 1), np.int32)}
    instance = instances(triton_examples / "simple_sequence")
    got = outputs(instance.execute([request("simple_sequence", inputs)])[0])
    np.testing.assert_array_equal(got["OUTPUT"], np.array([[6], [7]], np.int32))


def test_simple_dyna_sequence_with_controls_fed_by_hand(
    triton_examples: Path, instances: LoadInstance
) -> None:
    """``OUTPUT = READY * (INPUT + START + END * CORRID)``, CORRID a UINT64 control."""
    inputs: dict[str, np.ndarray[Any, Any]] = {
        "INPUT": np.array([[5]], np.int32),
        "START": np.array([[0]], np.int32),
        "END": np.array([[1]], np.int32),
        "READY": np.array([[1]], np.int32),
        "CORRID": np.array([[100]], np.uint64),
    }
    instance = instances(triton_examples / "simple_dyna_sequence")
    got = outputs(instance.execute([request("simple_dyna_sequence", inputs)])[0])
    np.testing.assert_array_equal(got["OUTPUT"], np.array([[105]], np.int32))
