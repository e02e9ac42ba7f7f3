"""A server over a repository built for the HTTP tests: example models plus purpose-made ones."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import modes
from tests.support.http import RawClient
from tests.support.models import (
    EXTRA_OUTPUT_PY,
    IDENTITY_PY,
    ONE_OUTPUT_PY,
    SUB_ADD_PY,
    identity_config,
    write_identity,
    write_model,
)
from tests.support.server import ServerProcess

# Every test through a server taking frontend_workers runs in both server modes (tests.support.modes).
frontend_workers = modes.frontend_workers


DTYPES = [
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
    "BF16",
]

PARAMS_ECHO_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = json.dumps(json.loads(request.parameters()), sort_keys=True)
            names = ",".join(request.requested_output_names())
            out = pb_utils.Tensor("PARAMS", np.array([text.encode(), names.encode(), request.request_id().encode()], dtype=object))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""

DLPACK_IDENTITY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            out = pb_utils.Tensor.from_dlpack("OUTPUT0", tensor.to_dlpack())
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""

FAILING_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x[0] < 0:
                raise RuntimeError("negative input is not allowed")
            if x[0] == 0:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("zero is invalid", pb_utils.TritonError.INVALID_ARG)))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""


def _dtype_name(dtype: str) -> str:
    return "TYPE_STRING" if dtype == "BYTES" else f"TYPE_{dtype}"


#: A generate endpoint's model: ``TEXT`` is ``PROMPT`` then, for each of the optional ``IDS``, its
#: number; the request's ``STREAM`` flag and its parameters come back as response parameters.
PROMPTED_CONFIG = """
backend: "python"
input [ { name: "PROMPT" data_type: TYPE_STRING dims: [ 1, 1 ] },
        { name: "STREAM" data_type: TYPE_BOOL dims: [ 1, 1 ] },
        { name: "IDS" data_type: TYPE_INT32 dims: [ 1, -1 ] optional: true } ]
output [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1, -1 ] } ]
"""

PROMPTED_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy()
            stream = pb_utils.get_input_tensor_by_name(request, "STREAM").as_numpy()
            ids = pb_utils.get_input_tensor_by_name(request, "IDS")
            words = [prompt[0, 0]] + [str(i).encode() for i in (ids.as_numpy()[0] if ids else [])]
            text = pb_utils.Tensor("TEXT", np.array([words], dtype=np.object_))
            parameters = dict(json.loads(request.parameters()), shapes=str([prompt.shape, stream.shape]))
            responses.append(pb_utils.InferenceResponse([text], parameters=parameters))
        return responses
"""


#: Decoupled: ``COUNT`` responses carrying ``IN``, then a final one that is an error response.
STREAMED_CONFIG = """
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

STREAMED_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            for _ in range(int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
            failure = pb_utils.InferenceResponse(error=pb_utils.TritonError("the stream broke"))
            sender.send(failure, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


@pytest.fixture(scope="package")
def http_repository(tmp_path_factory: pytest.TempPathFactory, example_repository: Path) -> Path:
    repo = tmp_path_factory.mktemp("http-repo")
    for name in ("add_sub", "simple_identity", "simple", "simple_string"):
        if (example_repository / name).exists():
            shutil.copytree(example_repository / name, repo / name)
    add_sub_config = (example_repository / "add_sub" / "config.pbtxt").read_text()
    for name, source in (
        ("sub_add", SUB_ADD_PY),
        ("extra_output", EXTRA_OUTPUT_PY),
        ("one_output", ONE_OUTPUT_PY),
    ):
        write_model(repo, name, add_sub_config.replace('"add_sub"', f'"{name}"'), source)
    for dtype in DTYPES[:-1]:
        write_identity(repo, f"identity_{dtype.lower()}", _dtype_name(dtype))
    # as_numpy() refuses BF16 (DTYPES' last), as in Triton: that identity passes it through DLPack
    write_model(repo, "identity_bf16", identity_config("identity_bf16", "TYPE_BF16"), DLPACK_IDENTITY_PY)
    write_identity(repo, "batched_identity", "TYPE_INT32", max_batch_size=4)
    # raw binary requests: a BYTES input of one element, and a shape with two variable dimensions
    one_string = identity_config("one_string", "TYPE_STRING", 4).replace("[ -1 ]", "[ 1 ]")
    write_model(repo, "one_string", one_string, IDENTITY_PY)
    two_variable = identity_config("two_variable", "TYPE_FP16").replace("[ -1 ]", "[ -1, -1 ]")
    write_model(repo, "two_variable", two_variable, IDENTITY_PY)
    write_model(repo, "prompted", PROMPTED_CONFIG, PROMPTED_PY)
    write_model(repo, "streamed", STREAMED_CONFIG, STREAMED_PY)
    write_model(
        repo,
        "params_echo",
        """
        backend: "python"
        input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 3 ] },
                 { name: "OTHER" data_type: TYPE_INT32 dims: [ 1 ] } ]
        """,
        PARAMS_ECHO_PY,
    )
    write_model(
        repo,
        "failing",
        """
        backend: "python"
        input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
        """,
        FAILING_PY,
    )
    return repo


@pytest.fixture(scope="package")
def server(http_repository: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    with ServerProcess([http_repository], frontend_workers=frontend_workers) as process:
        yield process


@pytest.fixture
def raw(server: ServerProcess) -> Iterator[RawClient]:
    client = RawClient(server.http_url)
    yield client
    client.close()
