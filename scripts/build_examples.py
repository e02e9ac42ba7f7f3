"""Build the example ONNX models of ``examples/model_repository`` from code, with no downloads.

The ``.onnx`` files are generated rather than committed: they are binary, and built here they are
small, deterministic and reviewable.  The ``config.pbtxt`` and ``labels.txt`` files next to them are
committed and rewritten only when their text changes.  Re-running is cheap: a model is rebuilt only
when it is missing or older than this script (``--force`` rebuilds all).

The graph builders are importable so that tests and benchmarks build the same models::

    python scripts/build_examples.py [--force] [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "examples" / "model_repository"

#: Opset 17 / IR 8 load in every onnxruntime since 1.13, older than the oldest we support.
OPSET = 17
IR_VERSION = 8

#: The image classifier's classes: the nearest of these colours to the image's mean colour wins.
COLOURS: dict[str, tuple[float, float, float]] = {
    "red": (1.0, 0.0, 0.0),
    "green": (0.0, 1.0, 0.0),
    "blue": (0.0, 0.0, 1.0),
    "yellow": (1.0, 1.0, 0.0),
    "cyan": (0.0, 1.0, 1.0),
    "magenta": (1.0, 0.0, 1.0),
    "white": (1.0, 1.0, 1.0),
    "black": (0.0, 0.0, 0.0),
    "gray": (0.5, 0.5, 0.5),
    "orange": (1.0, 0.5, 0.0),
}


def make_model(graph: onnx.GraphProto) -> onnx.ModelProto:
    """A checked model of ``graph`` at our opset and IR version."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def save(model: onnx.ModelProto, path: Path) -> None:
    """Write atomically, so a server or test reading ``path`` never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    onnx.save(model, str(partial))
    os.replace(partial, path)


def _add_sub_graph(name: str, elem_type: int) -> onnx.GraphProto:
    """``OUTPUT0 = INPUT0 + INPUT1``, ``OUTPUT1 = INPUT0 - INPUT1`` on ``[batch, 16]`` tensors.

    String tensors go through INT32 and back, as Triton's own simple_string model does.
    """

    def info(tensor: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(tensor, elem_type, ["batch", 16])

    nodes: list[onnx.NodeProto] = []
    a, b = "INPUT0", "INPUT1"
    if elem_type == TensorProto.STRING:
        nodes += [
            helper.make_node("Cast", ["INPUT0"], ["a"], to=TensorProto.INT32),
            helper.make_node("Cast", ["INPUT1"], ["b"], to=TensorProto.INT32),
        ]
        a, b = "a", "b"
    sum_name, diff_name = ("sum", "diff") if elem_type == TensorProto.STRING else ("OUTPUT0", "OUTPUT1")
    nodes += [
        helper.make_node("Add", [a, b], [sum_name]),
        helper.make_node("Sub", [a, b], [diff_name]),
    ]
    if elem_type == TensorProto.STRING:
        nodes += [
            helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=TensorProto.STRING),
            helper.make_node("Cast", ["diff"], ["OUTPUT1"], to=TensorProto.STRING),
        ]
    return helper.make_graph(
        nodes, name, [info("INPUT0"), info("INPUT1")], [info("OUTPUT0"), info("OUTPUT1")]
    )


def build_simple(path: Path) -> None:
    """Triton's ``simple``: INT32 ``[batch, 16]`` inputs, their sum and difference."""
    save(make_model(_add_sub_graph("simple", TensorProto.INT32)), path)


def build_simple_string(path: Path) -> None:
    """Triton's ``simple_string``: numeric strings in, their sum and difference as strings out."""
    save(make_model(_add_sub_graph("simple_string", TensorProto.STRING)), path)


def build_image_classifier(path: Path) -> None:
    """``data_0`` FP32 ``[batch, 3, 224, 224]`` (RGB in [0, 1]) -> ``fc6_1`` ``[batch, 10, 1, 1]``.

    Shaped like Triton's densenet example (whose config reshapes ``fc6_1`` to ``[10]``), but the
    graph is two cheap, fixed ops: the mean colour (GlobalAveragePool), then a 1x1 convolution
    scoring ``2 m·c - |c|²`` for each colour ``c`` of :data:`COLOURS`, which is highest for the
    colour nearest the mean, so the top class of a plain-coloured image is its colour.
    """
    centres = np.array(list(COLOURS.values()), dtype=np.float32)
    weights = (2.0 * centres).reshape(len(COLOURS), 3, 1, 1)
    bias = -(centres**2).sum(axis=1)
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["data_0"], ["mean"]),
            helper.make_node("Conv", ["mean", "weights", "bias"], ["fc6_1"], kernel_shape=[1, 1]),
        ],
        "image_classifier",
        [helper.make_tensor_value_info("data_0", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info("fc6_1", TensorProto.FLOAT, ["batch", len(COLOURS), 1, 1])],
        initializer=[
            numpy_helper.from_array(weights.astype(np.float32), "weights"),
            numpy_helper.from_array(bias.astype(np.float32), "bias"),
        ],
    )
    save(make_model(graph), path)


def build_mlp(path: Path, sizes: Sequence[int] = (512, 2048, 2048, 512), seed: int = 0) -> None:
    """An FP32 MLP ``INPUT0 [batch, sizes[0]] -> OUTPUT0 [batch, sizes[-1]]``, ReLU between layers.

    Enough arithmetic per row that batching pays off, which is what the batching benchmark measures;
    He-initialised from ``seed`` so every build is the same model.
    """
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    current = "INPUT0"
    layers = len(sizes) - 1
    for index, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        weight = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        initializers += [
            numpy_helper.from_array(weight, f"w{index}"),
            numpy_helper.from_array(np.zeros(fan_out, dtype=np.float32), f"b{index}"),
        ]
        last = index == layers - 1
        linear = "OUTPUT0" if last else f"linear{index}"
        nodes.append(helper.make_node("Gemm", [current, f"w{index}", f"b{index}"], [linear]))
        if not last:
            nodes.append(helper.make_node("Relu", [linear], [f"relu{index}"]))
            current = f"relu{index}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", sizes[0]])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", sizes[-1]])],
        initializer=initializers,
    )
    save(make_model(graph), path)


SIMPLE_CONFIG = """\
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {{ name: "INPUT0" data_type: {type} dims: [ 16 ] }},
  {{ name: "INPUT1" data_type: {type} dims: [ 16 ] }}
]
output [
  {{ name: "OUTPUT0" data_type: {type} dims: [ 16 ] }},
  {{ name: "OUTPUT1" data_type: {type} dims: [ 16 ] }}
]
"""

IMAGE_CLASSIFIER_CONFIG = f"""\
name: "image_classifier"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {{
    name: "data_0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 224, 224 ]
  }}
]
output [
  {{
    name: "fc6_1"
    data_type: TYPE_FP32
    dims: [ {len(COLOURS)} ]
    reshape {{ shape: [ {len(COLOURS)}, 1, 1 ] }}
    label_filename: "labels.txt"
  }}
]
"""


class Example(NamedTuple):
    """One example model: how to build its file, and the text files that sit beside it.

    A NamedTuple rather than a dataclass: dataclasses need their module in ``sys.modules``, and this
    script is also loaded from its path (``importlib``), where it is not.
    """

    name: str
    build: Callable[[Path], None]
    files: dict[str, str]


EXAMPLES = (
    Example("simple", build_simple, {"config.pbtxt": SIMPLE_CONFIG.format(name="simple", type="TYPE_INT32")}),
    Example(
        "simple_string",
        build_simple_string,
        {"config.pbtxt": SIMPLE_CONFIG.format(name="simple_string", type="TYPE_STRING")},
    ),
    Example(
        "image_classifier",
        build_image_classifier,
        {"config.pbtxt": IMAGE_CLASSIFIER_CONFIG, "labels.txt": "".join(f"{c}\n" for c in COLOURS)},
    ),
)


def _write_text(path: Path, text: str) -> bool:
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def build_all(out: Path = DEFAULT_OUT, force: bool = False) -> list[Path]:
    """Build every example under ``out``; return the files written (empty when all up to date)."""
    script_time = Path(__file__).stat().st_mtime
    written: list[Path] = []
    for example in EXAMPLES:
        model_dir = out / example.name
        for filename, text in example.files.items():
            if _write_text(model_dir / filename, text):
                written.append(model_dir / filename)
        model_file = model_dir / "1" / "model.onnx"
        if force or not model_file.exists() or model_file.stat().st_mtime < script_time:
            example.build(model_file)
            written.append(model_file)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild models that are up to date")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="model repository to write into")
    args = parser.parse_args(argv)
    written = build_all(args.out, args.force)
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"examples in {args.out} are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
