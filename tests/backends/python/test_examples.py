"""The example repository's Python models, loaded as the server loads them."""

from __future__ import annotations

import numpy as np
from naiad.core.request import InferResponse

from tests.backends.python.models import EXAMPLES, LoadInstance, instance_context, request


def _outputs(result: object) -> dict[str, np.ndarray]:
    assert isinstance(result, InferResponse), result
    return {tensor.name: tensor.data for tensor in result.outputs}


def test_add_sub_sums_and_differences_every_request_of_a_batch(instances: LoadInstance) -> None:
    instance = instances(EXAMPLES / "add_sub")
    requests = [
        request("add_sub", f"r{i}", INPUT0=[1.0 * i, 2, 3, 4], INPUT1=[0.5, 1, 1, 2]) for i in range(3)
    ]
    results = instance.execute(requests)
    assert len(results) == 3
    for i, result in enumerate(results):
        assert isinstance(result, InferResponse)
        assert (result.model_name, result.model_version, result.id) == ("add_sub", "1", f"r{i}")
        outputs = _outputs(result)
        np.testing.assert_array_equal(outputs["OUTPUT0"], [i + 0.5, 3, 4, 6])
        np.testing.assert_array_equal(outputs["OUTPUT1"], [i - 0.5, 1, 2, 2])
        assert [t.datatype for t in result.outputs] == ["FP32", "FP32"]


def test_add_sub_requests_pass_the_signature_the_server_checks() -> None:
    signature = instance_context(EXAMPLES / "add_sub").signature
    assert signature.validate(request("add_sub", INPUT0=[1, 2, 3, 4], INPUT1=[1, 2, 3, 4])) == 1


def test_mul_multiplies_elementwise(instances: LoadInstance) -> None:
    instance = instances(EXAMPLES / "mul")
    (result,) = instance.execute([request("mul", INPUT0=[1, 2, 3, 4], INPUT1=[2, 0.5, -1, 0])])
    outputs = _outputs(result)
    assert list(outputs) == ["OUTPUT"]
    np.testing.assert_array_equal(outputs["OUTPUT"], [2, 1, -3, 0])
    assert outputs["OUTPUT"].dtype == np.float32


def test_simple_identity_returns_bytes_unchanged_nuls_included(instances: LoadInstance) -> None:
    instance = instances(EXAMPLES / "simple_identity")
    data = np.empty((1, 2), dtype=np.object_)
    data[0] = [b"he\x00llo", b"\x00\x01"]
    req = request("simple_identity", INPUT0=data)
    assert instance_context(EXAMPLES / "simple_identity").signature.validate(req) == 1
    (result,) = instance.execute([req])
    assert isinstance(result, InferResponse)
    (output,) = result.outputs
    assert (output.name, output.datatype, output.shape) == ("OUTPUT0", "BYTES", (1, 2))
    assert output.data.dtype == np.object_
    assert output.data.tolist() == [[b"he\x00llo", b"\x00\x01"]]
