"""The example models through the ONNX Runtime backend: values, batching, output subsets, errors."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from naiad.core.errors import ErrorCode, InferenceServerError
from naiad.core.request import InferResponse

from tests.backends.onnxruntime.models import LoadInstance, as_bytes, build_examples, request


def outputs(result: object) -> dict[str, np.ndarray[Any, Any]]:
    assert isinstance(result, InferResponse), result
    return {tensor.name: tensor.data for tensor in result.outputs}


def test_simple_adds_and_subtracts(examples: Path, instances: LoadInstance) -> None:
    instance = instances(examples / "simple")
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    [result] = instance.execute([request("simple", {"INPUT0": a, "INPUT1": b})])
    assert isinstance(result, InferResponse)
    assert (result.model_name, result.model_version, result.id) == ("simple", "1", "simple-request")
    assert [(t.name, t.datatype) for t in result.outputs] == [("OUTPUT0", "INT32"), ("OUTPUT1", "INT32")]
    got = outputs(result)
    np.testing.assert_array_equal(got["OUTPUT0"], a + b)
    np.testing.assert_array_equal(got["OUTPUT1"], a - b)
    assert got["OUTPUT0"].dtype == np.int32


def test_simple_string_returns_bytes(examples: Path, instances: LoadInstance) -> None:
    instance = instances(examples / "simple_string")
    a, b = np.arange(16).reshape(1, 16), np.arange(16, 32).reshape(1, 16)
    [result] = instance.execute([request("simple_string", {"INPUT0": as_bytes(a), "INPUT1": as_bytes(b)})])
    got = outputs(result)
    assert got["OUTPUT0"].dtype == np.object_ and got["OUTPUT0"].shape == (1, 16)
    assert all(isinstance(v, bytes) for v in got["OUTPUT0"].flat)
    np.testing.assert_array_equal(got["OUTPUT0"], as_bytes(a + b))
    np.testing.assert_array_equal(got["OUTPUT1"], as_bytes(a - b))
    assert isinstance(result, InferResponse)
    assert [t.datatype for t in result.outputs] == ["BYTES", "BYTES"]


def test_image_classifier_scores_the_nearest_colour(examples: Path, instances: LoadInstance) -> None:
    model_dir = examples / "image_classifier"
    labels = (model_dir / "labels.txt").read_text().split()
    instance = instances(model_dir)
    colours = {"red": (1.0, 0.0, 0.0), "blue": (0.05, 0.1, 0.9), "gray": (0.45, 0.5, 0.55)}
    images = np.stack(
        [np.broadcast_to(np.array(rgb, np.float32)[:, None, None], (3, 224, 224)) for rgb in colours.values()]
    )
    [result] = instance.execute([request("image_classifier", {"data_0": images})])
    scores = outputs(result)["fc6_1"]
    assert scores.shape == (3, 10) and scores.dtype == np.float32  # reshape [10,1,1] undone
    assert [labels[i] for i in scores.argmax(axis=1)] == list(colours)


def test_batched_requests_match_separate_runs(examples: Path, instances: LoadInstance) -> None:
    instance = instances(examples / "simple")
    rng = np.random.default_rng(0)
    requests = [
        request(
            "simple",
            {
                "INPUT0": rng.integers(-100, 100, (n, 16), dtype=np.int32),
                "INPUT1": rng.integers(-100, 100, (n, 16), dtype=np.int32),
            },
        )
        for n in (1, 2, 3)
    ]
    together = [outputs(r) for r in instance.execute(requests)]
    separate = [outputs(instance.execute([r])[0]) for r in requests]
    for n, joint, alone in zip((1, 2, 3), together, separate, strict=True):
        assert joint["OUTPUT0"].shape == (n, 16)
        np.testing.assert_array_equal(joint["OUTPUT0"], alone["OUTPUT0"])
        np.testing.assert_array_equal(joint["OUTPUT1"], alone["OUTPUT1"])


def test_batched_string_requests_match_separate_runs(examples: Path, instances: LoadInstance) -> None:
    instance = instances(examples / "simple_string")
    requests = [
        request(
            "simple_string",
            {"INPUT0": as_bytes(np.full((n, 16), n)), "INPUT1": as_bytes(np.arange(16 * n).reshape(n, 16))},
        )
        for n in (1, 2, 3)
    ]
    together = [outputs(r) for r in instance.execute(requests)]
    for n, joint in zip((1, 2, 3), together, strict=True):
        np.testing.assert_array_equal(joint["OUTPUT0"], as_bytes(n + np.arange(16 * n).reshape(n, 16)))


def test_requested_outputs_only(examples: Path, instances: LoadInstance) -> None:
    instance = instances(examples / "simple")
    a = np.ones((1, 16), dtype=np.int32)
    subset = request("simple", {"INPUT0": a, "INPUT1": a}, outputs=["OUTPUT1"])
    everything = request("simple", {"INPUT0": a, "INPUT1": a})
    [alone] = instance.execute([subset])
    assert list(outputs(alone)) == ["OUTPUT1"]
    mixed = instance.execute([subset, everything])
    assert list(outputs(mixed[0])) == ["OUTPUT1"]
    assert list(outputs(mixed[1])) == ["OUTPUT0", "OUTPUT1"]
    np.testing.assert_array_equal(outputs(mixed[1])["OUTPUT0"], a + a)


def test_runtime_error_fails_the_run_and_instance_recovers(examples: Path, instances: LoadInstance) -> None:
    instance = instances(examples / "simple_string")
    bad = as_bytes(np.full((1, 16), "x"))
    good = as_bytes(np.ones((1, 16), dtype=np.int32))
    [failed] = instance.execute([request("simple_string", {"INPUT0": bad, "INPUT1": good})])
    assert isinstance(failed, InferenceServerError) and failed.code is ErrorCode.INTERNAL
    assert "Cast" in failed.message or "stoll" in failed.message
    [ok] = instance.execute([request("simple_string", {"INPUT0": good, "INPUT1": good})])
    np.testing.assert_array_equal(outputs(ok)["OUTPUT0"], as_bytes(np.full((1, 16), 2)))


def test_non_utf8_string_fails_only_its_request(examples: Path, instances: LoadInstance) -> None:
    instance = instances(examples / "simple_string")
    good = as_bytes(np.ones((1, 16), dtype=np.int32))
    bad = good.copy()
    bad[0, 3] = b"\xff"
    results = instance.execute(
        [
            request("simple_string", {"INPUT0": good, "INPUT1": good}),
            request("simple_string", {"INPUT0": bad, "INPUT1": good}),
            request("simple_string", {"INPUT0": good, "INPUT1": good}),
        ]
    )
    assert isinstance(results[1], InferenceServerError) and results[1].code is ErrorCode.INVALID_ARG
    assert "INPUT0" in results[1].message and "UTF-8" in results[1].message
    for result in (results[0], results[2]):
        np.testing.assert_array_equal(outputs(result)["OUTPUT1"], as_bytes(np.zeros((1, 16), dtype=int)))


def test_build_script_is_idempotent_and_fast(tmp_path: Path) -> None:
    script = build_examples()
    start = time.perf_counter()
    first = script.build_all(tmp_path)
    elapsed = time.perf_counter() - start
    assert {p.relative_to(tmp_path).as_posix() for p in first} >= {
        "simple/1/model.onnx",
        "simple_string/1/model.onnx",
        "image_classifier/1/model.onnx",
        "image_classifier/labels.txt",
        "simple/config.pbtxt",
    }
    assert elapsed < 5
    assert script.build_all(tmp_path) == []
    assert len(script.build_all(tmp_path, force=True)) == 3
    assert script.main(["--out", str(tmp_path)]) == 0
