"""DLPack in ``pb_utils`` for every datatype, BF16 included (numpy 2.4 refuses bfloat16 in DLPack).

BF16 tensors go through DLPack only: ``as_numpy()`` raises for them as in Triton (NVIDIA's
``identity_bf16`` model, L0_backend_python's ``test_bf16``, asserts that), so the checks read them
through torch.

Triton's Python backend hands BF16 tensors through ``to_dlpack``/``from_dlpack`` (that is how models
pass them to torch); with the newest numpy and ml_dtypes the pins allow this failed with ``BufferError:
DLPack only supports signed/unsigned integers, float and complex dtypes``, over HTTP and gRPC alike.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from naiad.backends.python import dlpack, pb_utils

from tests.support.models import write_model
from tests.support.server import ServerProcess

#: Every datatype DLPack can carry (BYTES cannot), with the numpy dtype a client sends.
DTYPES: dict[str, Any] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": ml_dtypes.bfloat16,
}

#: Each input goes out through DLPack both ways: ``from_dlpack(to_dlpack())``, then through a torch
#: tensor made from the ``pb_utils.Tensor`` itself (``__dlpack__``) for the dtypes torch has.
DLPACK_PY = """
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for tensor in request.inputs():
                name = tensor.name().replace("INPUT", "OUTPUT")
                if tensor.name() == "INPUT_BF16":
                    try:
                        tensor.as_numpy()
                    except pb_utils.TritonModelException as e:
                        assert "tensor dtype is bf16 and cannot be converted to numpy" in str(e).lower()
                    else:
                        raise Exception("Expected BF16 conversion to numpy to fail")
                copy = pb_utils.Tensor.from_dlpack(name, tensor.to_dlpack())
                if tensor.name() == "INPUT_BF16":
                    copy = pb_utils.Tensor.from_dlpack(name, torch.from_dlpack(copy) * 2)
                outputs.append(copy)
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""


def _config(name: str, datatypes: list[str]) -> str:
    def tensors(prefix: str) -> str:
        return ", ".join(f'{{ name: "{prefix}_{d}" data_type: TYPE_{d} dims: [ -1 ] }}' for d in datatypes)

    return f"""
    name: "{name}"
    backend: "python"
    max_batch_size: 0
    input [ {tensors("INPUT")} ]
    output [ {tensors("OUTPUT")} ]
    """


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("dlpack-repo")
    write_model(repo, "dlpack_bf16", _config("dlpack_bf16", ["BF16"]), DLPACK_PY)
    write_model(repo, "dlpack_all", _config("dlpack_all", list(DTYPES)), DLPACK_PY)
    with ServerProcess([repo]) as process:
        yield process


def _data(datatype: str) -> np.ndarray[Any, Any]:
    if datatype == "BOOL":
        return np.array([True, False, True])
    return np.array(
        [1.5, -2.0, 3.25] if datatype.startswith(("FP", "BF")) else [1, 2, 3], dtype=DTYPES[datatype]
    )


def _expected(datatype: str) -> np.ndarray[Any, Any]:
    data = _data(datatype)
    return (data.astype(np.float32) * 2).astype(data.dtype) if datatype == "BF16" else data


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize(("model", "datatypes"), [("dlpack_bf16", ["BF16"]), ("dlpack_all", list(DTYPES))])
def test_tensors_pass_through_dlpack_in_a_model(
    server: ServerProcess, protocol: str, model: str, datatypes: list[str]
) -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    try:
        inputs = []
        for datatype in datatypes:
            tensor = module.InferInput(f"INPUT_{datatype}", [3], datatype)
            tensor.set_data_from_numpy(_data(datatype))
            inputs.append(tensor)
        result = client.infer(model, inputs)
        for datatype in datatypes:
            output = result.as_numpy(f"OUTPUT_{datatype}")
            assert output.dtype == _expected(datatype).dtype, datatype
            assert output.tolist() == _expected(datatype).tolist(), datatype
    finally:
        client.close()


def test_bfloat16_round_trips_without_a_copy() -> None:
    array = np.array([[1.5, 2.0], [3.0, -4.0]], dtype=ml_dtypes.bfloat16)
    tensor = pb_utils.Tensor("X", array)
    back = torch.from_dlpack(pb_utils.Tensor.from_dlpack("Y", tensor.to_dlpack()))
    assert back.dtype == torch.bfloat16 and back.data_ptr() == array.ctypes.data
    assert back.tolist() == array.astype(np.float32).tolist()
    assert torch.from_dlpack(pb_utils.Tensor.from_dlpack("Z", tensor)).data_ptr() == array.ctypes.data


def test_bfloat16_goes_to_and_comes_from_torch() -> None:
    array = np.array([1.5, 2.0, -3.25], dtype=ml_dtypes.bfloat16)
    as_torch = torch.from_dlpack(pb_utils.Tensor("X", array))
    assert as_torch.dtype == torch.bfloat16 and as_torch.tolist() == [1.5, 2.0, -3.25]
    assert torch.from_dlpack(pb_utils.Tensor("X", array).to_dlpack()).dtype == torch.bfloat16
    strided = torch.tensor([[1.0, 2.5], [3.0, 4.5]], dtype=torch.bfloat16).t()  # not contiguous
    for source in (strided, torch.utils.dlpack.to_dlpack(strided)):
        back = torch.from_dlpack(pb_utils.Tensor.from_dlpack("Y", source))
        assert back.dtype == torch.bfloat16 and back.tolist() == [[1.0, 3.0], [2.5, 4.5]]


def test_consumed_bfloat16_exports_are_released() -> None:
    array = np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16)
    before = len(dlpack._exported)
    views = [torch.from_dlpack(pb_utils.Tensor("X", array)) for _ in range(3)]
    assert len(dlpack._exported) == before + 3
    del views
    gc.collect()
    assert len(dlpack._exported) == before


def test_bfloat16_as_numpy_raises_as_in_triton() -> None:
    tensor = pb_utils.Tensor("X", np.array([1.5], dtype=ml_dtypes.bfloat16))
    with pytest.raises(
        pb_utils.TritonModelException, match="Tensor dtype is BF16 and cannot be converted to NumPy"
    ):
        tensor.as_numpy()


def test_other_refusals_keep_their_message() -> None:
    with pytest.raises(pb_utils.TritonModelException, match="unable to read DLPack tensor 'C'"):
        pb_utils.Tensor.from_dlpack("C", torch.zeros(2, dtype=torch.float8_e4m3fn))
