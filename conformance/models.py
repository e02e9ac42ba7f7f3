"""Model repositories for the conformance run: NVIDIA's own files copied unchanged, plus ONNX models we build.

Only the files NVIDIA ships are copied (configs, ``model.py`` files, label files); what NVIDIA downloads
or builds with TensorFlow or a GPU is either made here from code (a stand-in with the same inputs,
outputs and shapes) or its scripts are skipped.  Nothing here is committed output: every run builds
into a fresh temporary folder.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: Opset 17 / IR 8, as scripts/build_examples.py uses: loadable by every onnxruntime we support.
OPSET = 17
IR_VERSION = 8


def copy_model(source: Path, repository: Path, name: str | None = None) -> Path:
    """Copy the model folder ``source`` (config, versions, labels) unchanged into ``repository``."""
    target = repository / (name or source.name)
    shutil.copytree(source, target)
    return target


def place_python_model(
    repository: Path, name: str, model_py: Path, config: Path | None = None, version: int = 1
) -> Path:
    """``<repository>/<name>/<version>/model.py`` (and ``config.pbtxt``) from NVIDIA's files, unchanged.

    This is the layout NVIDIA's READMEs and test scripts make with ``mkdir -p`` and ``cp``.
    """
    folder = repository / name
    (folder / str(version)).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model_py, folder / str(version) / "model.py")
    if config is not None:
        shutil.copyfile(config, folder / "config.pbtxt")
    return folder


def edit_config(folder: Path, *edits: tuple[str, str], append: str = "") -> None:
    """Apply a test script's ``sed -i 's/PATTERN/REPLACEMENT/'`` edits (line-anchored regexes) to a config.

    NVIDIA's qa scripts adapt a shared config to each test this way; we make the same edits.
    """
    path = folder / "config.pbtxt"
    text = path.read_text()
    for pattern, replacement in edits:
        text = re.sub(pattern, replacement, text, flags=re.MULTILINE)
    path.write_text(text + append)


def _save(graph: onnx.GraphProto, path: Path) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def build_densenet_standin(path: Path, classes: int = 1000, seed: int = 0) -> None:
    """An ONNX stand-in for Triton's ``densenet_onnx`` (whose weights NVIDIA downloads): same tensors.

    ``data_0`` FP32 ``[1, 3, 224, 224]`` -> ``fc6_1`` ``[1, classes, 1, 1]``, as the unchanged
    ``config.pbtxt`` of ``docs/examples/model_repository/densenet_onnx`` reshapes them.  Each class
    has a colour; the score ``2 m·c - |c|²`` of the image's mean colour ``m`` is highest for the
    nearest one, so the answer depends on the image and is the same on every run.
    """
    centres = np.random.default_rng(seed).uniform(-1.0, 1.0, size=(classes, 3)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["data_0"], ["mean"]),
            helper.make_node("Conv", ["mean", "weights", "bias"], ["fc6_1"], kernel_shape=[1, 1]),
        ],
        "densenet_standin",
        [helper.make_tensor_value_info("data_0", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("fc6_1", TensorProto.FLOAT, [1, classes, 1, 1])],
        initializer=[
            numpy_helper.from_array((2.0 * centres).reshape(classes, 3, 1, 1), "weights"),
            numpy_helper.from_array(-(centres**2).sum(axis=1), "bias"),
        ],
    )
    _save(graph, path)


IDENTITY_CONFIG = """\
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: {type} dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: {type} dims: [ -1 ] }} ]
"""


def build_identity(repository: Path, name: str) -> Path:
    """An INT32 ONNX ``INPUT0 -> OUTPUT0`` identity, in place of Triton's C++ ``identity`` backend model."""
    folder = repository / name
    dims: list[str | int] = ["batch", "n"]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        name,
        [helper.make_tensor_value_info("INPUT0", TensorProto.INT32, dims)],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.INT32, dims)],
    )
    _save(graph, folder / "1" / "model.onnx")
    (folder / "config.pbtxt").write_text(IDENTITY_CONFIG.format(name=name, type="TYPE_INT32"))
    return folder
