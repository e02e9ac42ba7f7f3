"""The benchmark's model repository: many small Triton models of a few memory sizes, written fast.

Python models hold a numpy buffer allocated (and touched, so it is resident) in ``initialize``: the
file is a few hundred bytes whatever the size, so a repository of 2-3 GiB of models is written (and
synced through S3) in a second.  ONNX models are a ``MatMul`` by a weight initializer of the given
size (the weight lives in the ``.onnx`` file, as real weights do) or a weightless ``Identity``.
Every model takes ``INPUT0`` FP32 ``[1, 16]`` and answers ``OUTPUT0`` FP32 ``[1, 16]``; the answer is
checked by the load generator (identity: the input; matmul: the input times an all-ones weight block).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTH = 16
MIB = 1 << 20

PYTHON_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # resident, not just reserved: every page written
        self.weights = np.ones({floats}, dtype=np.float32)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", (x + self.weights[0] - 1.0).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""

PYTHON_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1, {width} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1, {width} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

ONNX_CONFIG = """name: "{name}"
backend: "onnxruntime"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1, {width} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1, {width} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


@dataclass(frozen=True)
class Kind:
    """One family of models: backend, the memory it holds (MiB), how many of them."""

    prefix: str
    backend: str  # "python" | "onnx-matmul" | "onnx-identity"
    mib: int
    count: int

    def expected(self, x: np.ndarray) -> np.ndarray:
        if self.backend == "onnx-matmul":
            return x @ np.ones((WIDTH, WIDTH), dtype=np.float32) / WIDTH
        return x


#: 200 models.  Sizes are nominal (the buffer or weight); the servers measure the real footprints.
DEFAULT_MIX = (
    Kind("py5", "python", 5, 30),
    Kind("py20", "python", 20, 12),
    Kind("py50", "python", 50, 4),
    Kind("onnxid", "onnx-identity", 0, 60),
    Kind("onnx1", "onnx-matmul", 1, 60),
    Kind("onnx4", "onnx-matmul", 4, 34),
)


def model_names(mix: tuple[Kind, ...]) -> list[tuple[str, Kind]]:
    return [(f"{kind.prefix}_{i:03d}", kind) for kind in mix for i in range(kind.count)]


def _matmul_onnx(mib: int) -> bytes:
    """``OUTPUT0 = INPUT0 @ W[:, :16] / 16`` where ``W`` is ``[16, rows]`` of ones, ``mib`` MiB of FP32.

    The whole initializer is resident once onnxruntime loads it; a Slice takes the first 16 columns so
    the answer stays ``[1, 16]``."""
    columns = max(WIDTH, mib * MIB // (4 * WIDTH))
    weight = np.ones((WIDTH, columns), dtype=np.float32) / WIDTH
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["INPUT0", "W"], ["wide"]),
            helper.make_node("Slice", ["wide", "starts", "ends", "axes"], ["OUTPUT0"]),
        ],
        "matmul",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [1, WIDTH])],
        [
            numpy_helper.from_array(weight, "W"),
            numpy_helper.from_array(np.array([0], dtype=np.int64), "starts"),
            numpy_helper.from_array(np.array([WIDTH], dtype=np.int64), "ends"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axes"),
        ],
    )
    return _serialize(graph)


def _identity_onnx() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [1, WIDTH])],
    )
    return _serialize(graph)


def _serialize(graph: onnx.GraphProto) -> bytes:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def write_repository(root: Path, mix: tuple[Kind, ...] = DEFAULT_MIX) -> list[tuple[str, Kind]]:
    """Write every model of ``mix`` under ``root``; each distinct ONNX file is built once."""
    onnx_files: dict[tuple[str, int], bytes] = {}
    models = model_names(mix)
    for name, kind in models:
        version = root / name / "1"
        version.mkdir(parents=True, exist_ok=True)
        if kind.backend == "python":
            (root / name / "config.pbtxt").write_text(PYTHON_CONFIG.format(name=name, width=WIDTH))
            floats = kind.mib * MIB // 4
            (version / "model.py").write_text(PYTHON_MODEL.format(floats=floats))
        else:
            key = (kind.backend, kind.mib)
            if key not in onnx_files:
                onnx_files[key] = _identity_onnx() if kind.mib == 0 else _matmul_onnx(kind.mib)
            (root / name / "config.pbtxt").write_text(ONNX_CONFIG.format(name=name, width=WIDTH))
            (version / "model.onnx").write_bytes(onnx_files[key])
    return models
