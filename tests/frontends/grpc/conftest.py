"""Servers for the gRPC tests: real ``naiad serve`` processes over small Python-backend models.

Every datatype gets an identity model (``identity_fp32``...), so what a client sends comes back
byte for byte; ``add_sub`` is the example repository's, and ``sub_add`` the same model returning its
outputs in the other order (``OUTPUT1`` first); ``decoupled`` is a decoupled model (ModelInfer must
refuse it before running anything).
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import modes
from tests.support.models import SUB_ADD_PY
from tests.support.server import EXAMPLES, ServerProcess

# Every test through a server taking frontend_workers runs in both server modes (tests.support.modes).
frontend_workers = modes.frontend_workers


#: Datatypes a Python-backend model can carry (BF16 has no numpy type there, as in Triton).
DATATYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BYTES"]

_IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""


def _model(root: Path, name: str, config: str, source: str = _IDENTITY) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "1" / "model.py").write_text(textwrap.dedent(source))
    (root / name / "config.pbtxt").write_text(textwrap.dedent(config))


def _config_type(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


@pytest.fixture(scope="session")
def grpc_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grpc_models")
    shutil.copytree(EXAMPLES / "add_sub", root / "add_sub")
    config = (EXAMPLES / "add_sub" / "config.pbtxt").read_text().replace('"add_sub"', '"sub_add"')
    _model(root, "sub_add", config, SUB_ADD_PY)
    for datatype in DATATYPES:
        _model(root, f"identity_{datatype.lower()}", f"""
            backend: "python"
            max_batch_size: 8
            input [{{ name: "INPUT0" data_type: {_config_type(datatype)} dims: [ -1 ] }}]
            output [{{ name: "OUTPUT0" data_type: {_config_type(datatype)} dims: [ -1 ] }}]
            """)
    _model(root, "decoupled", """
        backend: "python"
        model_transaction_policy { decoupled: true }
        input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }]
        output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }]
        """)
    return root


@pytest.fixture(scope="session")
def grpc_server(grpc_repository: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    """One server with Triton's defaults, shared by the tests that do not change its state."""
    with ServerProcess([grpc_repository], frontend_workers=frontend_workers) as server:
        yield server


@pytest.fixture(scope="session")
def limited_server(grpc_repository: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    """A server with a 32 MiB message limit and compressed inference responses."""
    args = ["--grpc-max-message-size=33554432", "--grpc-infer-response-compression-level=high"]
    with ServerProcess([grpc_repository], args, frontend_workers=frontend_workers) as server:
        yield server
