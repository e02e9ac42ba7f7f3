"""Purpose-made Python models for the model-management tests.

``marked`` models answer every request with ``MARK`` = ``"<mark>:<version>"``, so a test can tell
which load of which version served it; ``LOAD_DELAY`` makes ``initialize`` slow (a reload in
progress), ``FAIL`` makes it raise (a bad reload).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from tests.support.models import write_model

MARKED_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "MARK" data_type: TYPE_STRING dims: [ 1 ] }}
]
instance_group [ {{ kind: KIND_CPU count: {count} }} ]
{extra}
"""

MARKED_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils

MARK = {mark!r}
LOAD_DELAY = {delay!r}
FAIL = {fail!r}


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(LOAD_DELAY)
        if FAIL:
            raise RuntimeError(FAIL)
        self.version = args["model_version"]
        self.executions = 0

    def execute(self, requests):
        self.executions += 1
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x.reshape(-1)[0] < 0:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("negative input", pb_utils.TritonError.INVALID_ARG)))
                continue
            shape = x.shape[:-1] + (1,)
            mark = np.full(shape, f"{{MARK}}:{{self.version}}".encode(), dtype=object)
            count = np.full(x.shape, self.executions, dtype=np.int32)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", count), pb_utils.Tensor("MARK", mark)]))
        return responses
"""


def marked_config(name: str, *, max_batch_size: int = 0, count: int = 1, extra: str = "") -> str:
    return MARKED_CONFIG.format(name=name, max_batch_size=max_batch_size, count=count, extra=extra)


def marked_py(mark: str, *, delay: float = 0.0, fail: str = "") -> str:
    return MARKED_PY.format(mark=mark, delay=delay, fail=fail)


def write_marked(
    repo: Path,
    name: str,
    mark: str = "a",
    *,
    versions: tuple[int, ...] = (1,),
    delay: float = 0.0,
    fail: str = "",
    config_extra: str = "",
    max_batch_size: int = 0,
) -> Path:
    """A marked model with the given versions (all with the same ``model.py``)."""
    model_dir = repo / name
    for version in versions:
        write_model(
            repo,
            name,
            marked_config(name, max_batch_size=max_batch_size, extra=config_extra),
            marked_py(mark, delay=delay, fail=fail),
            version,
        )
    return model_dir


def set_mark(model_dir: Path, version: int, mark: str, *, delay: float = 0.0, fail: str = "") -> None:
    """Replace one version's ``model.py`` in one rename (a new file, so a reload sees a change, and
    never a half-written one)."""
    folder = model_dir / str(version)
    folder.mkdir(parents=True, exist_ok=True)
    temp = folder / f".model.py.{os.getpid()}.{threading.get_ident()}"
    temp.write_text(marked_py(mark, delay=delay, fail=fail))
    os.replace(temp, folder / "model.py")
