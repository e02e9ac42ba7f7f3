"""Every datatype round-trips through an identity model, in binary and (where allowed) JSON."""

from __future__ import annotations

from collections.abc import Iterator

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.frontends.http.conftest import DTYPES
from tests.support.http import RawClient
from tests.support.server import ServerProcess


def _sample(dtype: str) -> np.ndarray:
    if dtype == "BOOL":
        return np.array([True, False, True])
    if dtype == "BYTES":
        return np.array([b"a", b"\x00b", b"ccc"], dtype=np.object_)
    if dtype in ("FP16", "FP32", "FP64"):
        return np.array(
            [1.5, -2.25, 3.0], dtype={"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}[dtype]
        )
    if dtype == "BF16":
        return np.array([1.5, -2.25, 3.0], dtype=ml_dtypes.bfloat16)
    np_dtype = np.dtype(dtype.lower().replace("uint", "uint").replace("int", "int"))
    info = np.iinfo(np_dtype)
    return np.array([info.min, 0, info.max], dtype=np_dtype)


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_round_trip(client: httpclient.InferenceServerClient, dtype: str) -> None:
    data = _sample(dtype)
    inp = httpclient.InferInput("INPUT0", [3], dtype)
    inp.set_data_from_numpy(data, binary_data=True)
    result = client.infer(
        f"identity_{dtype.lower()}", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0")]
    )
    assert result.get_output("OUTPUT0")["datatype"] == dtype
    got = result.as_numpy("OUTPUT0")
    assert got.tolist() == data.tolist()


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d not in ("FP16", "BF16")])
def test_json_round_trip(client: httpclient.InferenceServerClient, dtype: str) -> None:
    data = _sample(dtype)
    inp = httpclient.InferInput("INPUT0", [3], dtype)
    inp.set_data_from_numpy(data, binary_data=False)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
    result = client.infer(f"identity_{dtype.lower()}", [inp], outputs=[out])
    expected = [b.decode() for b in data.tolist()] if dtype == "BYTES" else data.tolist()
    assert result.as_numpy("OUTPUT0").tolist() == expected


@pytest.mark.parametrize("dtype", ["FP16", "BF16"])
def test_half_precision_in_json_is_rejected(client: httpclient.InferenceServerClient, dtype: str) -> None:
    inp = httpclient.InferInput("INPUT0", [3], dtype)
    inp.set_data_from_numpy(_sample(dtype), binary_data=True)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
    with pytest.raises(InferenceServerException) as info:
        client.infer(f"identity_{dtype.lower()}", [inp], outputs=[out])
    assert f"sending {dtype} data via JSON is not supported" in str(info.value)
    assert info.value.status() == "400"


@pytest.mark.parametrize("dtype", ["FP32", "FP64"])
def test_non_finite_values_cross_json_as_triton_writes_them(
    client: httpclient.InferenceServerClient, raw: RawClient, dtype: str
) -> None:
    # tritonclient writes a JSON input with Python's json.dumps: NaN, Infinity and -Infinity, which
    # Triton's parser takes; Triton writes them back the same way (a JSON null would lose them)
    data = np.array([np.nan, np.inf, -np.inf, 0.5], dtype=np.float32 if dtype == "FP32" else np.float64)
    for binary_input in (False, True):
        inp = httpclient.InferInput("INPUT0", [4], dtype)
        inp.set_data_from_numpy(data, binary_data=binary_input)
        out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
        result = client.infer(f"identity_{dtype.lower()}", [inp], outputs=[out])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    body = (
        '{"inputs":[{"name":"INPUT0","shape":[4],"datatype":"DTYPE","data":[NaN,Infinity,-Infinity,0.5]}],'
        '"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":false}}]}'
    ).replace("DTYPE", dtype)
    answer = raw.request("POST", f"/v2/models/identity_{dtype.lower()}/infer", body)
    assert answer.status == 200
    assert b'"data":[NaN,Infinity,-Infinity,0.5]' in answer.body
    # still not JSON: refused as before, in orjson's words
    refused = raw.request("POST", f"/v2/models/identity_{dtype.lower()}/infer", body.replace("NaN", "nan"))
    assert refused.status == 400 and b"failed to parse the request JSON buffer" in refused.body
