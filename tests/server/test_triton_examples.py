"""Triton's own example repository (real ONNX files) loads and serves unchanged."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.server import TRITON_EXAMPLES, ServerProcess

pytestmark = pytest.mark.skipif(
    not TRITON_EXAMPLES.is_dir(), reason=f"Triton's example repository is not present at {TRITON_EXAMPLES}"
)


@pytest.fixture(scope="module")
def client() -> Iterator[httpclient.InferenceServerClient]:
    with ServerProcess([TRITON_EXAMPLES]) as server:
        c = httpclient.InferenceServerClient(server.http_url)
        yield c
        c.close()


def test_every_model_is_ready(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_ready()
    for name in ("simple", "simple_int8", "simple_string", "simple_sequence", "simple_dyna_sequence"):
        assert client.is_model_ready(name), name


@pytest.mark.parametrize(("model", "dtype"), [("simple", "INT32"), ("simple_int8", "INT8")])
def test_simple_sum_and_difference(client: httpclient.InferenceServerClient, model: str, dtype: str) -> None:
    a = np.arange(16, dtype=np.dtype(dtype.lower())).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.dtype(dtype.lower()))
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], dtype),
        httpclient.InferInput("INPUT1", [1, 16], dtype),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_simple_string(client: httpclient.InferenceServerClient) -> None:
    a = np.array([[str(i).encode() for i in range(16)]], dtype=np.object_)
    b = np.array([[b"1"] * 16], dtype=np.object_)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "BYTES"),
        httpclient.InferInput("INPUT1", [1, 16], "BYTES"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("simple_string", inputs)
    assert [int(x) for x in result.as_numpy("OUTPUT0")[0]] == [i + 1 for i in range(16)]
    assert [int(x) for x in result.as_numpy("OUTPUT1")[0]] == [i - 1 for i in range(16)]
