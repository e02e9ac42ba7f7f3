"""Write small Triton models into a temporary repository (configs and Python-backend model.py files)."""

from __future__ import annotations

import textwrap
from pathlib import Path

IDENTITY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            out = pb_utils.Tensor("OUTPUT0", tensor.as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


def add_sub_returning(outputs: str) -> str:
    """``model.py`` of a model with ``add_sub``'s inputs (``a`` and ``b`` in its code) whose responses
    carry ``outputs``, a Python list of ``pb_utils.Tensor`` (for models run under ``add_sub``'s config)."""
    return f"""
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse({outputs}))
        return responses
"""


#: Its outputs out of config order.
SUB_ADD_PY = add_sub_returning('[pb_utils.Tensor("OUTPUT1", a - b), pb_utils.Tensor("OUTPUT0", a + b)]')
#: An output its config lacks (``EXTRA``) between the two it has.
EXTRA_OUTPUT_PY = add_sub_returning(
    '[pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("EXTRA", a * b), pb_utils.Tensor("OUTPUT1", a - b)]'
)
#: Only ``OUTPUT1``.
ONE_OUTPUT_PY = add_sub_returning('[pb_utils.Tensor("OUTPUT1", a - b)]')


def write_model(repo: Path, name: str, config: str, model_py: str | None = None, version: int = 1) -> Path:
    """``<repo>/<name>/config.pbtxt`` and, for Python models, ``<version>/model.py``."""
    model_dir = repo / name
    (model_dir / str(version)).mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(textwrap.dedent(config))
    if model_py is not None:
        (model_dir / str(version) / "model.py").write_text(textwrap.dedent(model_py))
    return model_dir


def identity_config(name: str, data_type: str, max_batch_size: int = 0) -> str:
    return f'''
    name: "{name}"
    backend: "python"
    max_batch_size: {max_batch_size}
    input [ {{ name: "INPUT0" data_type: {data_type} dims: [ -1 ] }} ]
    output [ {{ name: "OUTPUT0" data_type: {data_type} dims: [ -1 ] }} ]
    '''


def write_identity(repo: Path, name: str, data_type: str, max_batch_size: int = 0) -> Path:
    return write_model(repo, name, identity_config(name, data_type, max_batch_size), IDENTITY_PY)
