"""Python models of a known memory footprint for the on-demand and eviction tests.

Each ``ballast`` model fills ``mib`` MiB of memory in ``initialize`` (pages written, so they are resident
in its model process) and answers ``OUTPUT0 = INPUT0 + offset``, so a test can tell the models apart.  A
negative input makes it sleep that many milliseconds first (a request kept in flight), after creating the
file ``executing`` in the model's folder (so a test knows the request is running).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.models import write_model

BALLAST_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

BALLAST_PY = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils

MIB = {mib!r}
OFFSET = {offset!r}
LOAD_DELAY = {delay!r}


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(LOAD_DELAY)
        self.folder = args["model_repository"]
        self.ballast = np.ones(MIB * 2**20, dtype=np.uint8)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x.reshape(-1)[0] < 0:
                open(os.path.join(self.folder, "executing"), "w").close()
                time.sleep(-int(x.reshape(-1)[0]) / 1000)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", (x + OFFSET).astype(np.int32))]))
        return responses
"""


def write_ballast(repo: Path, name: str, *, mib: int = 30, offset: int = 0, delay: float = 0.0) -> Path:
    """A model holding ``mib`` MiB once loaded, answering ``INPUT0 + offset``."""
    return write_model(
        repo, name, BALLAST_CONFIG.format(name=name), BALLAST_PY.format(mib=mib, offset=offset, delay=delay)
    )
